-- The example's source database (README, "Many tables in one declaration"):
-- mysql -h 127.0.0.1 -u root < pipelines/shop_sync/source.sql
DROP DATABASE IF EXISTS cdcflow_example_sync;
CREATE DATABASE cdcflow_example_sync;
USE cdcflow_example_sync;
CREATE TABLE customers (
  id INT PRIMARY KEY,
  name VARCHAR(60) NOT NULL,
  email VARCHAR(80) NOT NULL,
  city VARCHAR(40) NOT NULL
) ENGINE = InnoDB;
CREATE TABLE orders (
  id INT PRIMARY KEY,
  customer_id INT NOT NULL,
  status ENUM('new', 'paid', 'shipped', 'cancelled') NOT NULL,
  amount DECIMAL(10, 2) NOT NULL
) ENGINE = InnoDB;
CREATE TABLE order_lines (
  order_id INT NOT NULL,
  line INT NOT NULL,
  sku VARCHAR(20) NOT NULL,
  qty INT NOT NULL,
  PRIMARY KEY (order_id, line)
) ENGINE = InnoDB;
-- Scratch tables of the application: left out by `exclude:`.
CREATE TABLE tmp_import (id INT PRIMARY KEY, payload TEXT) ENGINE = InnoDB;
INSERT INTO customers VALUES
  (1, 'Ann Berg', 'ann@example.com', 'Oslo'),
  (2, 'Bob Diaz', 'bob@example.com', 'Lima');
INSERT INTO orders VALUES (10, 1, 'new', 120.00), (11, 2, 'paid', 35.50);
INSERT INTO order_lines VALUES (10, 1, 'mug', 2), (10, 2, 'tea', 1), (11, 1, 'pot', 1);
