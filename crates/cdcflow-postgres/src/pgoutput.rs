//! Decoding of `pgoutput` messages (protocol version 1), the payload of the XLogData
//! frames of a logical replication stream: PostgreSQL's "Logical Replication Message
//! Formats". `Begin` and `Commit` are decoded by the transport (pgwire-replication); the
//! rest is decoded here, with values kept as the text the server sends.

use crate::error::PgError;

/// One column of a [`Message::Relation`].
#[derive(Debug, Clone, PartialEq)]
pub struct RelationColumn {
    /// Part of the replica identity (the key unless `REPLICA IDENTITY FULL`).
    pub key: bool,
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
}

/// A column value of a tuple.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// A TOASTed value the change did not touch: the stream leaves it out.
    UnchangedToast,
    Text(String),
}

/// The pgoutput messages cdcflow reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Describes a table before its first change in a session (and again after it
    /// changed).
    Relation {
        id: u32,
        namespace: String,
        name: String,
        columns: Vec<RelationColumn>,
    },
    Insert {
        relation: u32,
        new: Vec<Value>,
    },
    /// `old` is the replica identity's old values when the key changed (or every old
    /// value under `REPLICA IDENTITY FULL`).
    Update {
        relation: u32,
        old: Option<Vec<Value>>,
        new: Vec<Value>,
    },
    /// `old` holds the key (every column under `REPLICA IDENTITY FULL`).
    Delete {
        relation: u32,
        old: Vec<Value>,
    },
    Truncate {
        relations: Vec<u32>,
    },
    /// Messages with no bearing on the rows (Type, Origin, logical messages).
    Other(u8),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PgError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(PgError::Protocol(format!(
                "pgoutput message ends early (wanted {n} bytes at offset {})",
                self.at
            )));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, PgError> {
        Ok(self.take(1)?[0])
    }

    fn i16(&mut self) -> Result<i16, PgError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, PgError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u32(&mut self) -> Result<u32, PgError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A NUL-terminated string.
    fn string(&mut self) -> Result<String, PgError> {
        let rest = &self.bytes[self.at..];
        let len = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| PgError::Protocol("pgoutput string without its NUL".into()))?;
        let s = String::from_utf8_lossy(&rest[..len]).into_owned();
        self.at += len + 1;
        Ok(s)
    }

    fn tuple(&mut self) -> Result<Vec<Value>, PgError> {
        let n = self.i16()?;
        let mut values = Vec::with_capacity(n.max(0) as usize);
        for _ in 0..n {
            values.push(match self.u8()? {
                b'n' => Value::Null,
                b'u' => Value::UnchangedToast,
                b't' => {
                    let len = self.i32()?;
                    let bytes = self.take(usize::try_from(len).unwrap_or(0))?;
                    // The server sends text in the database encoding; cdcflow asks
                    // for UTF8 (client_encoding), which pgoutput honours.
                    Value::Text(String::from_utf8(bytes.to_vec()).map_err(|e| {
                        PgError::Protocol(format!("a text value is not UTF-8: {e}"))
                    })?)
                }
                b'b' => {
                    return Err(PgError::Protocol(
                        "binary tuple values were not asked for".into(),
                    ));
                }
                other => {
                    return Err(PgError::Protocol(format!(
                        "unknown tuple value kind {:?}",
                        other as char
                    )));
                }
            });
        }
        Ok(values)
    }
}

/// Decodes one pgoutput message.
pub fn decode(bytes: &[u8]) -> Result<Message, PgError> {
    let mut r = Reader { bytes, at: 0 };
    let tag = r.u8()?;
    Ok(match tag {
        b'R' => {
            let id = r.u32()?;
            let namespace = r.string()?;
            let name = r.string()?;
            let _replica_identity = r.u8()?;
            let n = r.i16()?;
            let mut columns = Vec::with_capacity(n.max(0) as usize);
            for _ in 0..n {
                let flags = r.u8()?;
                columns.push(RelationColumn {
                    key: flags & 1 == 1,
                    name: r.string()?,
                    type_oid: r.u32()?,
                    type_modifier: r.i32()?,
                });
            }
            Message::Relation {
                id,
                namespace,
                name,
                columns,
            }
        }
        b'I' => {
            let relation = r.u32()?;
            expect_tag(&mut r, b'N')?;
            Message::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.u32()?;
            let mut old = None;
            let mut kind = r.u8()?;
            if kind == b'K' || kind == b'O' {
                old = Some(r.tuple()?);
                kind = r.u8()?;
            }
            if kind != b'N' {
                return Err(PgError::Protocol(format!(
                    "update without its new tuple (found {:?})",
                    kind as char
                )));
            }
            Message::Update {
                relation,
                old,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.u32()?;
            let kind = r.u8()?;
            if kind != b'K' && kind != b'O' {
                return Err(PgError::Protocol(format!(
                    "delete without its old tuple (found {:?})",
                    kind as char
                )));
            }
            Message::Delete {
                relation,
                old: r.tuple()?,
            }
        }
        b'T' => {
            let n = r.i32()?;
            let _options = r.u8()?;
            let mut relations = Vec::with_capacity(n.max(0) as usize);
            for _ in 0..n {
                relations.push(r.u32()?);
            }
            Message::Truncate { relations }
        }
        other => Message::Other(other),
    })
}

fn expect_tag(r: &mut Reader<'_>, wanted: u8) -> Result<(), PgError> {
    let got = r.u8()?;
    if got != wanted {
        return Err(PgError::Protocol(format!(
            "expected {:?}, found {:?}",
            wanted as char, got as char
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(values: &[Option<&str>]) -> Vec<u8> {
        let mut out = i16::try_from(values.len()).unwrap().to_be_bytes().to_vec();
        for v in values {
            match v {
                None => out.push(b'n'),
                Some("<toast>") => out.push(b'u'),
                Some(s) => {
                    out.push(b't');
                    out.extend(i32::try_from(s.len()).unwrap().to_be_bytes());
                    out.extend(s.as_bytes());
                }
            }
        }
        out
    }

    #[test]
    fn relation_message() {
        let mut m = vec![b'R'];
        m.extend(16385u32.to_be_bytes());
        m.extend(b"public\0customers\0");
        m.push(b'd');
        m.extend(2i16.to_be_bytes());
        m.push(1);
        m.extend(b"id\0");
        m.extend(20u32.to_be_bytes());
        m.extend((-1i32).to_be_bytes());
        m.push(0);
        m.extend(b"amount\0");
        m.extend(1700u32.to_be_bytes());
        m.extend((((12 << 16) | 2) + 4i32).to_be_bytes());
        let Message::Relation {
            id,
            namespace,
            name,
            columns,
        } = decode(&m).unwrap()
        else {
            panic!("not a relation")
        };
        assert_eq!(
            (id, namespace.as_str(), name.as_str()),
            (16385, "public", "customers")
        );
        assert_eq!(columns.len(), 2);
        assert!(columns[0].key && !columns[1].key);
        assert_eq!(columns[1].type_oid, 1700);
    }

    #[test]
    fn insert_update_delete_truncate() {
        let mut m = vec![b'I'];
        m.extend(7u32.to_be_bytes());
        m.push(b'N');
        m.extend(tuple(&[Some("1"), None, Some("<toast>")]));
        assert_eq!(
            decode(&m).unwrap(),
            Message::Insert {
                relation: 7,
                new: vec![Value::Text("1".into()), Value::Null, Value::UnchangedToast]
            }
        );

        let mut m = vec![b'U'];
        m.extend(7u32.to_be_bytes());
        m.push(b'K');
        m.extend(tuple(&[Some("1")]));
        m.push(b'N');
        m.extend(tuple(&[Some("2")]));
        assert_eq!(
            decode(&m).unwrap(),
            Message::Update {
                relation: 7,
                old: Some(vec![Value::Text("1".into())]),
                new: vec![Value::Text("2".into())]
            }
        );

        let mut m = vec![b'D'];
        m.extend(7u32.to_be_bytes());
        m.push(b'K');
        m.extend(tuple(&[Some("2"), None]));
        assert!(matches!(
            decode(&m).unwrap(),
            Message::Delete { relation: 7, .. }
        ));

        let mut m = vec![b'T'];
        m.extend(2i32.to_be_bytes());
        m.push(0);
        m.extend(7u32.to_be_bytes());
        m.extend(8u32.to_be_bytes());
        assert_eq!(
            decode(&m).unwrap(),
            Message::Truncate {
                relations: vec![7, 8]
            }
        );
    }

    #[test]
    fn a_cut_message_is_an_error_not_a_panic() {
        let mut m = vec![b'I'];
        m.extend(7u32.to_be_bytes());
        m.push(b'N');
        m.extend(1i16.to_be_bytes());
        m.push(b't');
        m.extend(10i32.to_be_bytes());
        m.extend(b"abc");
        assert!(matches!(decode(&m), Err(PgError::Protocol(_))));
    }
}
