//! SQLite's record format: the varints, and a row's values decoded from a record (a header of serial
//! types, then the values back to back), as the file format documents them (sqlite.org/fileformat2.html,
//! "Record Format"). Only UTF-8 text is read: the database header says which encoding the file uses,
//! and `mod.rs` refuses the others.
//!
//! This file must not read pages; it decodes bytes it is given.

/// One value of a row.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// A SQLite varint at the start of `bytes`: its value and its length (1 to 9 bytes).
pub fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (index, &byte) in bytes.iter().enumerate().take(9) {
        if index == 8 {
            return Some(((value << 8) | u64::from(byte), 9));
        }
        value = (value << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            return Some((value, index + 1));
        }
    }
    None
}

/// Bytes a value of `serial_type` takes in the record body.
fn value_len(serial_type: u64) -> Result<usize, String> {
    Ok(match serial_type {
        0 | 8 | 9 => 0,
        1..=4 => serial_type as usize,
        5 => 6,
        6 | 7 => 8,
        10 | 11 => return Err(format!("reserved serial type {serial_type}")),
        n => usize::try_from((n - 12) / 2).map_err(|_| "value too long".to_string())?,
    })
}

/// A big-endian two's-complement integer of 1 to 8 bytes.
fn signed(bytes: &[u8]) -> i64 {
    let mut value: i64 = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        -1
    } else {
        0
    };
    for &byte in bytes {
        value = (value << 8) | i64::from(byte);
    }
    value
}

fn decode_value(serial_type: u64, bytes: &[u8]) -> Result<Value, String> {
    Ok(match serial_type {
        0 => Value::Null,
        1..=6 => Value::Integer(signed(bytes)),
        7 => {
            let raw: [u8; 8] = bytes.try_into().map_err(|_| "short real".to_string())?;
            Value::Real(f64::from_be_bytes(raw))
        }
        8 => Value::Integer(0),
        9 => Value::Integer(1),
        n if n % 2 == 0 => Value::Blob(bytes.to_vec()),
        _ => Value::Text(
            String::from_utf8(bytes.to_vec()).map_err(|_| "text that is not UTF-8".to_string())?,
        ),
    })
}

/// Every value of a record, in column order.
pub fn decode(record: &[u8]) -> Result<Vec<Value>, String> {
    let (header_len, mut at) = varint(record).ok_or("record without a header")?;
    let header_len = usize::try_from(header_len).map_err(|_| "record header too long")?;
    if header_len > record.len() || header_len < at {
        return Err(format!(
            "record header of {header_len} bytes in a record of {}",
            record.len()
        ));
    }
    let mut body = header_len;
    let mut values = Vec::new();
    while at < header_len {
        let (serial_type, used) =
            varint(&record[at..header_len]).ok_or("truncated record header")?;
        at += used;
        let len = value_len(serial_type)?;
        let bytes = record
            .get(body..body.saturating_add(len))
            .ok_or("record body shorter than its header says")?;
        values.push(decode_value(serial_type, bytes)?);
        body += len;
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_of_one_to_nine_bytes() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x81]), None, "truncated");
    }

    #[test]
    fn a_record_of_every_kind_of_value() {
        // Header: length 7, then NULL, int8 (-2), 0, 1, text "hi", blob [9].
        let record = [7, 0, 1, 8, 9, 17, 14, 0xfe, b'h', b'i', 9];
        assert_eq!(
            decode(&record).expect("record"),
            vec![
                Value::Null,
                Value::Integer(-2),
                Value::Integer(0),
                Value::Integer(1),
                Value::Text("hi".into()),
                Value::Blob(vec![9]),
            ]
        );
    }

    #[test]
    fn a_record_shorter_than_its_header_is_an_error() {
        let error = decode(&[2, 19, b'a']).expect_err("text of 3 bytes, 1 present");
        assert!(error.contains("shorter"), "{error}");
    }
}
