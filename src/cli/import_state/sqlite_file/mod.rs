//! A read-only reader of SQLite database files, for `pincer import-openclaw`: the tables of OpenClaw's
//! SQLite store, row by row, without linking SQLite itself (its library was about a megabyte of the
//! binary for this one command). It reads the file format as sqlite.org documents it: the header, the
//! schema table, table b-trees in rowid order, rows by rowid, index b-trees by their first column, overflow
//! pages, and the committed frames of a write-ahead log. It never writes: a database with a hot rollback
//! journal (a transaction cut short, which only SQLite can roll back) is refused with a clear error.
//!
//! Queries are what the importer needs and no more: every row of a table (the caller sorts), and the rows
//! whose text key column equals a value, in the order of an index on that key (else in rowid order, sorted
//! by a column the caller names). Only UTF-8 databases are read.

mod btree;
mod record;
mod schema;
mod wal;

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use btree::{be32, Flow, Pages};
pub use record::Value;
use schema::TableShape;

const HEADER_MAGIC: &[u8; 16] = b"SQLite format 3\0";
const HEADER_BYTES: usize = 100;
/// The first bytes of a rollback journal that still holds a transaction to undo.
const HOT_JOURNAL_MAGIC: [u8; 8] = [0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7];

/// Why a database could not be read; the text names the file and what was wrong.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SqliteError(String);

/// One row: the values of the columns asked for, in that order.
#[derive(Clone, Debug, PartialEq)]
pub struct Row(pub Vec<Value>);

impl Row {
    fn value(&self, column: usize) -> &Value {
        self.0.get(column).unwrap_or(&Value::Null)
    }

    /// A text column (NULL is `None`; a number or blob is an error).
    pub fn text(&self, column: usize) -> Result<Option<String>, String> {
        match self.value(column) {
            Value::Null => Ok(None),
            Value::Text(text) => Ok(Some(text.clone())),
            other => Err(format!("column {column} is not text: {other:?}")),
        }
    }

    /// A text column that must be present.
    pub fn required_text(&self, column: usize) -> Result<String, String> {
        self.text(column)?
            .ok_or_else(|| format!("column {column} is NULL"))
    }

    /// An integer column (NULL is `None`).
    pub fn integer(&self, column: usize) -> Result<Option<i64>, String> {
        match self.value(column) {
            Value::Null => Ok(None),
            Value::Integer(value) => Ok(Some(*value)),
            other => Err(format!("column {column} is not an integer: {other:?}")),
        }
    }

    /// A blob column (NULL is `None`).
    pub fn blob(&self, column: usize) -> Result<Option<&[u8]>, String> {
        match self.value(column) {
            Value::Null => Ok(None),
            Value::Blob(bytes) => Ok(Some(bytes)),
            other => Err(format!("column {column} is not a blob: {other:?}")),
        }
    }
}

struct Table {
    root: u32,
    /// The columns, or why the table's `CREATE TABLE` text could not be read (an error when it is used).
    shape: Result<TableShape, String>,
    /// Key columns and root page of each index on the table that `index_equal` can walk.
    indexes: Vec<(Vec<String>, u32)>,
}

/// An open database file.
pub struct SqliteFile {
    path: PathBuf,
    pages: Pages,
    tables: HashMap<String, Table>,
}

impl SqliteFile {
    /// Opens `path` read-only and reads its schema.
    pub fn open(path: &Path) -> Result<SqliteFile, SqliteError> {
        let fail = |why: String| SqliteError(format!("{}: {why}", path.display()));
        let mut file = File::open(path).map_err(|e| fail(format!("cannot open: {e}")))?;
        let mut header = [0u8; HEADER_BYTES];
        file.read_exact(&mut header)
            .map_err(|_| fail("not a SQLite database (shorter than its header)".into()))?;
        if &header[..16] != HEADER_MAGIC {
            return Err(fail("not a SQLite database".into()));
        }
        refuse_hot_journal(path).map_err(fail)?;
        let pages = open_pages(path, file, &header).map_err(fail)?;
        let mut db = SqliteFile {
            path: path.to_path_buf(),
            pages,
            tables: HashMap::new(),
        };
        db.tables = db.read_schema().map_err(fail)?;
        Ok(db)
    }

    fn fail(&self, why: String) -> SqliteError {
        SqliteError(format!("{}: {why}", self.path.display()))
    }

    /// Whether the database has a table called `name`.
    pub fn has_table(&self, name: &str) -> bool {
        self.tables.contains_key(name)
    }

    /// The schema table's rows: tables with their shapes, then the indexes attached to them.
    fn read_schema(&self) -> Result<HashMap<String, Table>, String> {
        let mut entries = Vec::new();
        btree::scan_table(&self.pages, 1, &mut |_, payload| {
            let row = record::decode(&payload)?;
            entries.push(Row(row));
            Ok(Flow::Continue)
        })?;
        let mut tables = HashMap::new();
        for entry in &entries {
            let (kind, name) = (entry.text(0)?, entry.required_text(1)?);
            let (root, sql) = (entry.integer(3)?.unwrap_or(0), entry.text(4)?);
            if kind.as_deref() == Some("table") && root > 0 {
                let shape = schema::parse_table(sql.as_deref().unwrap_or_default())
                    .map_err(|why| format!("cannot read the definition of table {name}: {why}"));
                let root = u32::try_from(root).map_err(|_| format!("table {name}: bad root"))?;
                tables.insert(
                    name,
                    Table {
                        root,
                        shape,
                        indexes: Vec::new(),
                    },
                );
            }
        }
        for entry in &entries {
            if entry.text(0)?.as_deref() != Some("index") {
                continue;
            }
            let (name, table) = (entry.required_text(1)?, entry.required_text(2)?);
            let root = u32::try_from(entry.integer(3)?.unwrap_or(0)).unwrap_or(0);
            let Some(Table {
                shape: Ok(shape),
                indexes,
                ..
            }) = tables.get_mut(&table)
            else {
                continue;
            };
            let columns = match entry.text(4)? {
                Some(sql) => schema::parse_index(&sql),
                None => auto_index_number(&name)
                    .and_then(|n| shape.auto_indexes.get(n.checked_sub(1)?).cloned()),
            };
            let collated = |c: &Vec<String>| {
                c.iter().any(|column| {
                    shape
                        .collated
                        .iter()
                        .any(|k| k.eq_ignore_ascii_case(column))
                })
            };
            if let Some(columns) = columns.filter(|c| !c.is_empty() && !collated(c)) {
                if root > 0 {
                    indexes.push((columns, root));
                }
            }
        }
        Ok(tables)
    }

    fn table(&self, name: &str) -> Result<(&Table, &TableShape), SqliteError> {
        let table = self
            .tables
            .get(name)
            .ok_or_else(|| self.fail(format!("no table {name}")))?;
        let shape = table.shape.as_ref().map_err(|why| self.fail(why.clone()))?;
        Ok((table, shape))
    }

    /// Where each of `columns` sits in a record of `table` (`None`: the rowid).
    fn positions(
        &self,
        name: &str,
        shape: &TableShape,
        columns: &[&str],
    ) -> Result<Vec<Option<usize>>, SqliteError> {
        columns
            .iter()
            .map(|column| {
                let at = shape
                    .columns
                    .iter()
                    .position(|c| c.eq_ignore_ascii_case(column));
                match at {
                    Some(at) if shape.rowid_alias == Some(at) => Ok(None),
                    Some(at) => Ok(Some(at)),
                    None => Err(self.fail(format!("table {name} has no column {column}"))),
                }
            })
            .collect()
    }

    /// Every row of `table`, in rowid order, with the values of `columns`.
    pub fn for_each_row(
        &self,
        table: &str,
        columns: &[&str],
        visit: &mut dyn FnMut(Row) -> Result<(), String>,
    ) -> Result<(), SqliteError> {
        let (found, shape) = self.table(table)?;
        let positions = self.positions(table, shape, columns)?;
        btree::scan_table(&self.pages, found.root, &mut |rowid, payload| {
            visit(project(&positions, rowid, &payload)?)?;
            Ok(Flow::Continue)
        })
        .map(|_| ())
        .map_err(|why| self.fail(format!("table {table}: {why}")))
    }

    /// The rows of `table` whose text column `key_column` equals `key`, ordered by `order_column`, with
    /// the values of `columns`. Walks an index led by `key_column` when there is one.
    pub fn for_each_row_where(
        &self,
        table: &str,
        (key_column, key): (&str, &str),
        order_column: &str,
        columns: &[&str],
        visit: &mut dyn FnMut(Row) -> Result<(), String>,
    ) -> Result<(), SqliteError> {
        let (found, shape) = self.table(table)?;
        let positions = self.positions(table, shape, columns)?;
        let rowids = self
            .matching_rowids(table, (found, shape), key_column, key, order_column)
            .map_err(|why| self.fail(format!("table {table}: {why}")))?;
        for rowid in rowids {
            let payload = btree::find_row(&self.pages, found.root, rowid)
                .and_then(|row| {
                    row.ok_or_else(|| format!("an index names row {rowid}, which is missing"))
                })
                .map_err(|why| self.fail(format!("table {table}: {why}")))?;
            let row = project(&positions, rowid, &payload).map_err(|why| self.fail(why))?;
            visit(row).map_err(|why| self.fail(why))?;
        }
        Ok(())
    }

    /// Rowids of the matching rows in order: from an index on (key, order …) when the table has one,
    /// else from a scan, sorted by the order column.
    fn matching_rowids(
        &self,
        name: &str,
        (table, shape): (&Table, &TableShape),
        key_column: &str,
        key: &str,
        order_column: &str,
    ) -> Result<Vec<i64>, String> {
        let leads = |columns: &[String]| {
            columns.len() >= 2
                && columns[0].eq_ignore_ascii_case(key_column)
                && columns[1].eq_ignore_ascii_case(order_column)
        };
        let mut rowids = Vec::new();
        if let Some((_, root)) = table.indexes.iter().find(|(columns, _)| leads(columns)) {
            btree::index_equal(&self.pages, *root, key, &mut |entry| {
                match entry.last() {
                    Some(Value::Integer(rowid)) => rowids.push(*rowid),
                    _ => return Err("an index entry without a rowid".into()),
                }
                Ok(Flow::Continue)
            })?;
            return Ok(rowids);
        }
        let positions = self
            .positions(name, shape, &[key_column, order_column])
            .map_err(|e| e.to_string())?;
        let mut keyed = Vec::new();
        btree::scan_table(&self.pages, table.root, &mut |rowid, payload| {
            let row = project(&positions, rowid, &payload)?;
            if row.text(0)?.as_deref() == Some(key) {
                keyed.push((row.integer(1)?.unwrap_or(0), rowid));
            }
            Ok(Flow::Continue)
        })?;
        keyed.sort_unstable();
        rowids.extend(keyed.into_iter().map(|(_, rowid)| rowid));
        Ok(rowids)
    }
}

/// The values at `positions` of a record (`None`: the rowid); a record shorter than the table (columns
/// added later) reads NULL for the rest.
fn project(positions: &[Option<usize>], rowid: i64, payload: &[u8]) -> Result<Row, String> {
    let mut values = record::decode(payload)?;
    let mut row = Vec::with_capacity(positions.len());
    for position in positions {
        row.push(match position {
            None => Value::Integer(rowid),
            Some(at) if *at < values.len() => std::mem::replace(&mut values[*at], Value::Null),
            Some(_) => Value::Null,
        });
    }
    Ok(Row(row))
}

/// `N` of `sqlite_autoindex_<table>_<N>`.
fn auto_index_number(name: &str) -> Option<usize> {
    name.strip_prefix("sqlite_autoindex_")?
        .rsplit_once('_')?
        .1
        .parse()
        .ok()
}

/// A rollback journal beside the database that still holds a transaction to undo.
fn refuse_hot_journal(path: &Path) -> Result<(), String> {
    let mut journal = PathBuf::from(path);
    journal.as_mut_os_string().push("-journal");
    let mut magic = [0u8; 8];
    let hot = File::open(&journal)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok()
        && magic == HOT_JOURNAL_MAGIC;
    if hot {
        return Err(format!(
            "has a hot rollback journal ({}): a transaction was cut short; let OpenClaw open the \
             database once so SQLite rolls it back, then import again",
            journal.display()
        ));
    }
    Ok(())
}

/// The file's pages as the header (and a write-ahead log) describe them.
fn open_pages(path: &Path, file: File, header: &[u8; HEADER_BYTES]) -> Result<Pages, String> {
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n if n >= 512 && n.is_power_of_two() => usize::from(n),
        n => return Err(format!("a page size of {n} bytes")),
    };
    let reserved = usize::from(header[20]);
    if reserved > page_size - 480 {
        return Err(format!("{reserved} reserved bytes per page"));
    }
    match be32(header, 56) {
        0 | 1 => {}
        n => {
            return Err(format!(
                "text encoding {n} (UTF-16): only UTF-8 databases are read"
            ))
        }
    }
    let file_len = file.metadata().map_err(|e| e.to_string())?.len();
    let counted = be32(header, 28);
    let mut page_count = if counted > 0 && be32(header, 24) == be32(header, 92) {
        counted
    } else {
        u32::try_from(file_len / page_size as u64).map_err(|_| "too many pages")?
    };
    let mut wal_path = PathBuf::from(path);
    wal_path.as_mut_os_string().push("-wal");
    let index = wal::read(&wal_path, page_size).map_err(|e| format!("cannot read its log: {e}"))?;
    let wal = match index.page_count {
        Some(count) => {
            page_count = count;
            let log = File::open(&wal_path).map_err(|e| format!("cannot read its log: {e}"))?;
            Some((log, index))
        }
        None => None,
    };
    Ok(Pages {
        file,
        wal,
        page_size,
        usable: page_size - reserved,
        page_count,
    })
}

#[cfg(test)]
mod tests;
