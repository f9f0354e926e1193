//! A query's rows read with `COPY (query) TO STDOUT`, in COPY's text format: the server
//! streams them as it produces them, while the client turns the ones already come into
//! values. A cursor's `FETCH` would make each wait for the other at every round trip.
//! The text of each value is the one a query gives (the type's output function), with
//! COPY's escapes undone.

use futures::StreamExt;
use tokio_postgres::Client;

use crate::error::PgError;

/// Runs `query`, whose rows have `width` columns, through COPY and hands each row's
/// values (text, `None` for null) to `each`, in the query's order: how many rows there
/// were.
pub(crate) async fn copy_rows(
    client: &Client,
    query: &str,
    width: usize,
    mut each: impl FnMut(Vec<Option<String>>) -> Result<(), PgError>,
) -> Result<u64, PgError> {
    let stream = client
        .copy_out(&format!("COPY ({query}) TO STDOUT"))
        .await?;
    futures::pin_mut!(stream);
    let mut lines = Lines::default();
    let mut n = 0_u64;
    let mut take = |row: Vec<Option<String>>| {
        // A row of no columns is an empty line, as is one of an empty text.
        let row = match width {
            0 => vec![],
            _ => row,
        };
        if row.len() != width {
            return Err(PgError::Protocol(format!(
                "COPY gave a row of {} values for a query of {width} columns",
                row.len()
            )));
        }
        n += 1;
        each(row)
    };
    while let Some(data) = stream.next().await {
        lines.feed(&data?, &mut take)?;
    }
    lines.finish()?;
    Ok(n)
}

/// Rows cut out of the stream's data, whose messages need not end at a row's end.
#[derive(Default)]
struct Lines {
    /// The start of a row the data so far has not ended.
    partial: Vec<u8>,
}

impl Lines {
    /// Hands each row `data` ends to `each`.
    fn feed(
        &mut self,
        data: &[u8],
        each: &mut impl FnMut(Vec<Option<String>>) -> Result<(), PgError>,
    ) -> Result<(), PgError> {
        let mut rest = data;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let line = &rest[..end];
            each(match self.partial.is_empty() {
                true => row(line)?,
                false => {
                    self.partial.extend_from_slice(line);
                    let whole = std::mem::take(&mut self.partial);
                    row(&whole)?
                }
            })?;
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    /// Fails if the stream ended inside a row.
    fn finish(&self) -> Result<(), PgError> {
        match self.partial.is_empty() {
            true => Ok(()),
            false => Err(PgError::Protocol(
                "COPY's data ended inside a row".to_string(),
            )),
        }
    }
}

/// One row of COPY's text format: values split by tabs, `\N` for null.
fn row(line: &[u8]) -> Result<Vec<Option<String>>, PgError> {
    line.split(|&b| b == b'\t').map(value).collect()
}

fn value(field: &[u8]) -> Result<Option<String>, PgError> {
    if field == b"\\N" {
        return Ok(None);
    }
    let bytes = match field.contains(&b'\\') {
        false => field.to_vec(),
        true => unescape(field),
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| PgError::Protocol("COPY gave a value that is not UTF-8".to_string()))
}

/// COPY's backslash escapes undone: `\b \f \n \r \t \v`, octal `\ooo`, hex `\xhh`, and
/// a backslash before any other character standing for that character.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        i += 1;
        if b != b'\\' || i == field.len() {
            out.push(b);
            continue;
        }
        let c = field[i];
        i += 1;
        match c {
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            b'0'..=b'7' => {
                let mut n = u32::from(c - b'0');
                for _ in 0..2 {
                    match field.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            n = n * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((n & 0xff) as u8);
            }
            b'x' if field.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                let mut n = 0_u32;
                for _ in 0..2 {
                    match field.get(i).and_then(|d| char::from(*d).to_digit(16)) {
                        Some(d) => {
                            n = n * 16 + d;
                            i += 1;
                        }
                        None => break,
                    }
                }
                out.push((n & 0xff) as u8);
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some(s.to_string())).collect()
    }

    /// The rows `data` ends.
    fn fed(lines: &mut Lines, data: &[u8]) -> Vec<Vec<Option<String>>> {
        let mut rows = vec![];
        lines
            .feed(data, &mut |row| {
                rows.push(row);
                Ok(())
            })
            .unwrap();
        rows
    }

    #[test]
    fn rows_split_across_messages_are_joined() {
        let mut lines = Lines::default();
        assert_eq!(fed(&mut lines, b"1\ta\n2\t"), vec![text(&["1", "a"])]);
        assert_eq!(fed(&mut lines, b"b"), Vec::<Vec<Option<String>>>::new());
        assert_eq!(
            fed(&mut lines, b"\n3\t\\N\n"),
            vec![text(&["2", "b"]), vec![Some("3".into()), None]]
        );
        assert!(lines.finish().is_ok());
        fed(&mut lines, b"4\t");
        assert!(lines.finish().is_err());
    }

    #[test]
    fn escapes_are_undone() {
        let got = row(b"a\\tb\\nc\\\\d\\r\\101\\x42\\q\t\\\\N\t").unwrap();
        assert_eq!(
            got,
            vec![
                Some("a\tb\nc\\d\rABq".to_string()),
                Some("\\N".to_string()),
                Some(String::new())
            ]
        );
        // Multibyte text passes as it is.
        assert_eq!(row("é日".as_bytes()).unwrap(), text(&["é日"]));
    }
}
