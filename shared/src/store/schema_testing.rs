//! For tests of a delegate's own tables (feature `testing`): the schema as
//! the migrations make it, and a schema's shape to compare with.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

/// A database at `path` made by every migration from version 0, as an
/// older database ends up once a plugin has upgraded it.
pub fn migrated(path: &Path) -> Connection {
    let mut conn = Connection::open(path).unwrap();
    super::schema::migrate(&mut conn, path, Duration::ZERO).unwrap();
    conn
}

/// Everything of a schema a query or a write depends on, by table: columns
/// (name, type, NOT NULL, default, key), rowid or not, and each index with
/// its columns, uniqueness, origin and condition.
pub fn shape(conn: &Connection) -> BTreeMap<String, Vec<String>> {
    let rows = |sql: &str| -> Vec<Vec<rusqlite::types::Value>> {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        let rows = stmt.query_map([], |row| (0..n).map(|i| row.get(i)).collect()).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    };
    let names = |sql: &str| -> Vec<String> {
        let mut stmt = conn.prepare(sql).unwrap();
        let names = stmt.query_map([], |row| row.get(0)).unwrap();
        names.collect::<rusqlite::Result<_>>().unwrap()
    };
    let mut shape = BTreeMap::new();
    for t in names("SELECT name FROM sqlite_master WHERE type = 'table'") {
        let mut of_table = vec![
            format!("table {t}: {:?}", rows(&format!("PRAGMA table_list('{t}')"))),
            format!("columns {t}: {:?}", rows(&format!("PRAGMA table_xinfo('{t}')"))),
        ];
        for index in names(&format!("SELECT name FROM pragma_index_list('{t}')")) {
            let list = rows(&format!("SELECT * FROM pragma_index_list('{t}') WHERE name = '{index}'"));
            let columns = rows(&format!("PRAGMA index_xinfo('{index}')"));
            let sql = rows(&format!("SELECT sql FROM sqlite_master WHERE name = '{index}'"));
            of_table.push(format!("index {t} {list:?}: {columns:?} {sql:?}"));
        }
        of_table.sort();
        shape.insert(t, of_table);
    }
    shape
}
