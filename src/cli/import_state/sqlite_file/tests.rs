//! The reader against files SQLite itself wrote (through rusqlite, a dev-dependency only).

use std::path::Path;

use rusqlite::Connection;

use super::*;

fn all_rows(db: &SqliteFile, table: &str, columns: &[&str]) -> Vec<Row> {
    let mut rows = Vec::new();
    db.for_each_row(table, columns, &mut |row| {
        rows.push(row);
        Ok(())
    })
    .expect("rows");
    rows
}

fn rows_where(db: &SqliteFile, table: &str, key: &str) -> Vec<(i64, String)> {
    let mut rows = Vec::new();
    db.for_each_row_where(
        table,
        ("session_id", key),
        "seq",
        &["seq", "event"],
        &mut |row| {
            rows.push((row.integer(0)?.expect("seq"), row.required_text(1)?));
            Ok(())
        },
    )
    .expect("rows where");
    rows
}

/// A text of `len` bytes that differs per `n` (so pages do not compress into sameness).
fn text(n: usize, len: usize) -> String {
    format!("{n}:").chars().cycle().take(len).collect()
}

fn events_table(path: &Path, primary_key: bool) -> Connection {
    let db = Connection::open(path).expect("create");
    let key = if primary_key {
        ", PRIMARY KEY (session_id, seq)"
    } else {
        ""
    };
    db.execute_batch(&format!(
        "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT{key}) STRICT"
    ))
    .expect("table");
    db
}

/// 3 sessions × 400 events, inserted out of order, some large enough to overflow.
fn fill_events(db: &Connection) {
    let mut insert = db
        .prepare("INSERT INTO events (session_id, seq, event) VALUES (?1, ?2, ?3)")
        .expect("insert");
    for round in 0..400usize {
        for session in ["s-b", "s-a", "s-c"] {
            let seq = (round * 7919) % 400;
            let len = if round % 50 == 0 {
                9_000
            } else {
                40 + round % 60
            };
            insert
                .execute(rusqlite::params![session, seq as i64, text(round, len)])
                .expect("row");
        }
    }
}

fn expected_events(db: &Connection, session: &str) -> Vec<(i64, String)> {
    let mut query = db
        .prepare("SELECT seq, event FROM events WHERE session_id = ?1 ORDER BY seq")
        .expect("query");
    let rows = query
        .query_map([session], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("rows");
    rows.collect::<Result<_, _>>().expect("collect")
}

#[test]
fn every_row_of_a_table_of_many_pages_with_overflowing_values() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("t.sqlite");
    let writer = Connection::open(&path).expect("create");
    writer
        .execute_batch(
            "CREATE TABLE t (key TEXT NOT NULL PRIMARY KEY, value TEXT, n INTEGER, b BLOB) STRICT",
        )
        .expect("table");
    for n in 0..1500usize {
        let len = if n % 100 == 0 { 70_000 } else { n % 300 };
        writer
            .execute(
                "INSERT INTO t VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![
                    format!("k{n:05}"),
                    text(n, len),
                    n as i64 - 700,
                    vec![n as u8; 3]
                ],
            )
            .expect("row");
    }
    drop(writer);
    let db = SqliteFile::open(&path).expect("open");
    let rows = all_rows(&db, "t", &["b", "key", "value", "n"]);
    assert_eq!(rows.len(), 1500);
    for (n, row) in rows.iter().enumerate() {
        assert_eq!(row.required_text(1).expect("key"), format!("k{n:05}"));
        let len = if n % 100 == 0 { 70_000 } else { n % 300 };
        assert_eq!(row.text(2).expect("value"), Some(text(n, len)), "row {n}");
        assert_eq!(row.integer(3).expect("n"), Some(n as i64 - 700));
        assert_eq!(row.blob(0).expect("b"), Some(&[n as u8; 3][..]));
    }
}

#[test]
fn rows_with_a_key_come_in_the_order_of_the_primary_key_index() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("e.sqlite");
    let writer = events_table(&path, true);
    fill_events(&writer);
    let db = SqliteFile::open(&path).expect("open");
    assert!(
        db.tables["events"]
            .indexes
            .iter()
            .any(|(c, _)| c == &["session_id", "seq"]),
        "the primary key's index is found"
    );
    for session in ["s-a", "s-b", "s-c"] {
        let rows = rows_where(&db, "events", session);
        assert_eq!(rows.len(), 400);
        assert_eq!(rows, expected_events(&writer, session), "{session}");
    }
    assert!(rows_where(&db, "events", "s-0").is_empty());
    assert!(rows_where(&db, "events", "s-z").is_empty());
}

#[test]
fn without_an_index_rows_with_a_key_are_found_and_sorted() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("e.sqlite");
    let writer = events_table(&path, false);
    fill_events(&writer);
    let db = SqliteFile::open(&path).expect("open");
    assert!(db.tables["events"].indexes.is_empty());
    assert_eq!(
        rows_where(&db, "events", "s-b"),
        expected_events(&writer, "s-b")
    );
}

#[test]
fn committed_rows_in_the_write_ahead_log_are_read_and_uncommitted_ones_are_not() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("w.sqlite");
    let writer = events_table(&path, true);
    writer
        .execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; PRAGMA cache_size = 10;",
        )
        .expect("wal");
    fill_events(&writer);
    let wal_path = dir.path().join("w.sqlite-wal");
    let committed = std::fs::metadata(&wal_path).expect("wal").len();
    assert!(committed > 0, "the log holds the committed rows");
    // A transaction too large for the page cache spills its pages into the log before it commits.
    writer.execute_batch("BEGIN").expect("begin");
    for seq in 1000..1300 {
        writer
            .execute(
                "INSERT INTO events VALUES ('s-open', ?1, ?2)",
                rusqlite::params![seq, text(seq as usize, 3000)],
            )
            .expect("row");
    }
    let spilled = std::fs::metadata(&wal_path).expect("wal").len();
    assert!(
        spilled > committed,
        "uncommitted pages spilled into the log"
    );
    let db = SqliteFile::open(&path).expect("open");
    assert_eq!(
        rows_where(&db, "events", "s-a"),
        expected_events(&writer, "s-a")
    );
    assert!(
        rows_where(&db, "events", "s-open").is_empty(),
        "not committed"
    );
    writer.execute_batch("COMMIT").expect("commit");
    let db = SqliteFile::open(&path).expect("reopen");
    assert_eq!(rows_where(&db, "events", "s-open").len(), 300);
}

#[test]
fn columns_added_later_read_null_and_the_rowid_alias_reads_the_rowid() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("a.sqlite");
    let writer = Connection::open(&path).expect("create");
    writer
        .execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT);
             INSERT INTO t (id, name) VALUES (7, 'old');
             ALTER TABLE t ADD COLUMN note TEXT;
             INSERT INTO t (id, name, note) VALUES (9, 'new', 'n');",
        )
        .expect("schema");
    drop(writer);
    let db = SqliteFile::open(&path).expect("open");
    let rows = all_rows(&db, "t", &["id", "name", "note"]);
    assert_eq!(
        rows[0].0,
        vec![Value::Integer(7), Value::Text("old".into()), Value::Null]
    );
    assert_eq!(
        rows[1].0,
        vec![
            Value::Integer(9),
            Value::Text("new".into()),
            Value::Text("n".into())
        ]
    );
    let error = db
        .for_each_row("t", &["missing"], &mut |_| Ok(()))
        .expect_err("no such column");
    assert!(
        error.to_string().contains("has no column missing"),
        "{error}"
    );
}

#[test]
fn a_hot_journal_or_a_file_that_is_not_sqlite_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("j.sqlite");
    Connection::open(&path)
        .expect("create")
        .execute_batch("CREATE TABLE t (a TEXT)")
        .expect("table");
    let mut journal = HOT_JOURNAL_MAGIC.to_vec();
    journal.resize(512, 0);
    std::fs::write(dir.path().join("j.sqlite-journal"), journal).expect("journal");
    let error = SqliteFile::open(&path).err().expect("refused").to_string();
    assert!(error.contains("hot rollback journal"), "{error}");
    let other = dir.path().join("notes.txt");
    std::fs::write(&other, vec![b'x'; 200]).expect("write");
    let error = SqliteFile::open(&other).err().expect("refused").to_string();
    assert!(
        error.contains("notes.txt") && error.contains("not a SQLite database"),
        "{error}"
    );
}

#[test]
fn a_page_that_points_back_up_its_tree_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("loop.sqlite");
    let writer = Connection::open(&path).expect("create");
    writer
        .execute_batch("CREATE TABLE t (v TEXT)")
        .expect("table");
    for n in 0..400 {
        writer
            .execute("INSERT INTO t VALUES (?1)", [text(n, 200)])
            .expect("row");
    }
    let root: i64 = writer
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = 't'",
            [],
            |r| r.get(0),
        )
        .expect("root");
    drop(writer);
    let mut bytes = std::fs::read(&path).expect("read");
    let page = (root as usize - 1) * 4096;
    assert_eq!(bytes[page], 0x05, "the table's root is an interior page");
    bytes[page + 8..page + 12].copy_from_slice(&(root as u32).to_be_bytes());
    std::fs::write(&path, bytes).expect("write");
    let db = SqliteFile::open(&path).expect("open");
    let error = db
        .for_each_row("t", &["v"], &mut |_| Ok(()))
        .expect_err("a loop");
    assert!(error.to_string().contains("deeper than"), "{error}");
}
