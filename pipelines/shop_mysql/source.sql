-- The example's source table (README, "Capturing changes from MySQL and MariaDB"):
-- mysql -h 127.0.0.1 -u root < pipelines/shop_mysql/source.sql
DROP DATABASE IF EXISTS cdcflow_example_shop;
CREATE DATABASE cdcflow_example_shop;
USE cdcflow_example_shop;
CREATE TABLE orders (
  id INT PRIMARY KEY,
  customer VARCHAR(60) NOT NULL,
  status ENUM('new', 'paid', 'shipped', 'cancelled') NOT NULL,
  amount DECIMAL(10, 2) NOT NULL,
  placed_at DATETIME NOT NULL
) ENGINE = InnoDB;
INSERT INTO orders VALUES
  (1, 'Ann Berg', 'new', 120.00, '2026-11-30 09:15:00'),
  (2, 'Bob Diaz', 'paid', 35.50, '2026-11-30 10:02:00'),
  (3, 'Cy Lima', 'new', 12.99, '2026-12-01 08:45:00');
