//! Rule 9 of docs/semantics.md, IGNORE NULL UPDATES: a null in an upsert keeps the
//! previous value of that column, and a struct column's fields are taken one by one,
//! one level deep.

use std::cmp::Ordering;

use datafusion::arrow::array::{Array, AsArray, make_comparator};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::DataType;

use super::{Cells, FieldCells, P, View, Walk};

impl View<'_> {
    pub(super) fn is_null(&self, c: usize, p: P) -> bool {
        self.chunk(p).batch.column(c).is_null(p.r as usize)
    }

    /// The number of fields of column `c`, when it is a struct.
    pub(super) fn struct_width(&self, c: usize) -> Option<usize> {
        match self.rules.columns.field(c).data_type() {
            DataType::Struct(fields) => Some(fields.len()),
            _ => None,
        }
    }

    /// Whether field `f` of struct column `c` is null at `p` (the struct being null too).
    pub(super) fn field_is_null(&self, c: usize, f: usize, p: P) -> bool {
        let column = self.chunk(p).batch.column(c);
        column.is_null(p.r as usize) || column.as_struct().column(f).is_null(p.r as usize)
    }

    /// Field `f` of struct column `c` at `p` against at `q`.
    pub(super) fn field_cmp(&self, c: usize, f: usize, p: P, q: P) -> Ordering {
        if p == q {
            return Ordering::Equal;
        }
        match (self.field_is_null(c, f, p), self.field_is_null(c, f, q)) {
            (true, true) => return Ordering::Equal,
            (true, false) | (false, true) => return Ordering::Less,
            _ => {}
        }
        let value = |x: P| {
            self.chunk(x)
                .batch
                .column(c)
                .as_struct()
                .column(f)
                .slice(x.r as usize, 1)
        };
        let (a, b) = (value(p), value(q));
        make_comparator(a.as_ref(), b.as_ref(), SortOptions::default())
            .map_or(Ordering::Equal, |cmp| cmp(0, 0))
    }
}

impl Walk<'_, '_> {
    /// The row an upsert gives on top of `prev`: IGNORE NULL UPDATES columns keep the
    /// previous value when the upsert has null, and so do the fields of a struct
    /// column (`addr = {city: null, zip: '0151'}` over `{oslo, 0150}` gives `{oslo,
    /// 0151}`, as the Databricks documentation describes), one level deep.
    pub(super) fn merge(&self, prev: Option<&Cells>, event: P) -> Cells {
        let view = self.view;
        let Some(prev) = prev.filter(|_| !view.rules.ignore_null.is_empty()) else {
            return Cells::One(event);
        };
        let n = view.rules.columns.fields().len();
        let mut cells: Option<Vec<P>> = None;
        let mut fields: Vec<FieldCells> = Vec::new();
        for &c in &view.rules.ignore_null {
            if view.is_null(c, event) {
                if prev.get(c) != event {
                    cells.get_or_insert_with(|| vec![event; n])[c] = prev.get(c);
                    if let Some(kept) = prev.fields(c) {
                        fields.push((c, kept.to_vec()));
                    }
                }
                continue;
            }
            let Some(width) = view.struct_width(c) else {
                continue;
            };
            let mut own: Option<Vec<P>> = None;
            for f in 0..width {
                let before = prev.field(c, f);
                if view.field_is_null(c, f, event)
                    && before != event
                    && !view.field_is_null(c, f, before)
                {
                    own.get_or_insert_with(|| vec![event; width])[f] = before;
                }
            }
            if let Some(own) = own {
                cells.get_or_insert_with(|| vec![event; n]);
                fields.push((c, own));
            }
        }
        match cells {
            Some(cells) => Cells::Mixed(cells, fields),
            None => Cells::One(event),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{decide, del, rules, up};

    #[test]
    fn a_null_keeps_the_previous_value_back_to_the_last_delete() {
        let mut rules = rules(false);
        rules.ignore_null = vec![1, 2];
        let stored = [up(1, 1, Some(1), Some(1))];
        let (rows, _) = decide(&rules, &stored, &[up(1, 2, None, Some(5))], 0);
        assert_eq!(rows, vec![vec![Some(1), Some(1), Some(5)]]);
        // A delete starts the key afresh: nothing from before it fills a null.
        let (rows, _) = decide(&rules, &stored, &[del(1, 2), up(1, 3, None, Some(7))], 0);
        assert_eq!(rows, vec![vec![Some(1), None, Some(7)]]);
        // A late upsert still fills a column a newer upsert left null.
        let (rows, _) = decide(
            &rules,
            &[up(2, 5, None, Some(5))],
            &[up(2, 3, Some(3), None)],
            0,
        );
        assert_eq!(rows, vec![vec![Some(2), Some(3), Some(5)]]);
    }
}
