//! Cluster mode's tables in the node's database (`tables.sql`), made by this
//! crate through the core's one hook for a delegate's own tables,
//! [`Tx::sql`]. A new database lacks them: SQLite parses every table and
//! index of the schema when a connection first prepares a statement, and
//! these cost a node-local ADD 148K of its 1.3M instructions, for tables it
//! never reads. Cluster mode's first call on a node makes them; a database
//! that an older build migrated through schema versions 3 and 4 has them
//! already, in the same shape.

use shared::store::{AllocationStore, InDatabase, Tx};
use shared::Result;

/// The statements that make the tables where they are missing.
const TABLES: &str = include_str!("tables.sql");

const NAMES: [&str; 3] = ["cluster_blocks", "cluster_records", "cluster_notes"];

/// Whether the tables are there: one transaction makes them all, so none or
/// all. A database that no cluster call used has none, and so no cluster rows.
pub fn exist(tx: &Tx) -> Result<bool> {
    NAMES.iter().try_fold(true, |all, &name| Ok(all && tx.sql().table_exists(None, name).in_db(tx.path())?))
}

/// Makes the tables that are missing, in the caller's write transaction.
pub fn make(tx: &Tx) -> Result<()> {
    tx.sql().execute_batch(TABLES).in_db(tx.path())
}

/// Makes the tables where they are missing, under the lock, in one
/// transaction; once they are there, three lookups on the connection are
/// all it costs (every cluster call pays them).
pub fn make_missing(store: &mut AllocationStore) -> Result<()> {
    if store.has_tables(&NAMES)? {
        return Ok(());
    }
    store.write(make)
}

#[cfg(test)]
mod tests {
    use shared::store::{schema_testing, DEFAULT_LOCK_TIMEOUT};

    use super::*;

    fn open(path: &std::path::Path) -> AllocationStore {
        AllocationStore::open(path, DEFAULT_LOCK_TIMEOUT).unwrap()
    }

    fn table_names(store: &mut AllocationStore) -> Vec<String> {
        store
            .read(|tx| {
                let mut stmt = tx.sql().prepare("SELECT name FROM sqlite_master ORDER BY name").unwrap();
                let names = stmt.query_map([], |row| row.get(0)).unwrap();
                Ok(names.collect::<rusqlite::Result<Vec<String>>>().unwrap())
            })
            .unwrap()
    }

    /// A node-local database never has the tables (its calls would parse
    /// them at every open); cluster mode's first call makes them, and a
    /// process that opened the database before another one made them makes
    /// nothing twice and writes its rows into them.
    #[test]
    fn the_first_cluster_call_makes_the_tables_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipam.db");
        let mut first = open(&path);
        let owner = shared::args::Attachment { network: "n".into(), container_id: "c".into(), ifname: "eth0".into() };
        first.write(|tx| tx.insert_lease("10.0.0.1".parse().unwrap(), "p", &owner)).unwrap();
        assert!(!first.read(exist).unwrap());
        let mut second = open(&path);
        assert!(!second.read(exist).unwrap());

        make_missing(&mut first).unwrap();
        assert!(first.read(exist).unwrap());
        let made = table_names(&mut first);
        assert!(NAMES.iter().all(|name| made.iter().any(|m| m == name)), "{made:?}");
        make_missing(&mut second).unwrap();
        assert_eq!(table_names(&mut second), made, "the second maker changed the schema");
        second
            .write(|tx| {
                tx.sql().execute("INSERT INTO cluster_notes (name, value) VALUES ('a', 'b')", []).in_db(tx.path())?;
                Ok(())
            })
            .unwrap();
        let value: String = first
            .read(|tx| {
                tx.sql()
                    .query_row("SELECT value FROM cluster_notes WHERE name = 'a'", [], |r| r.get(0))
                    .in_db(tx.path())
            })
            .unwrap();
        assert_eq!(value, "b");
        // The lease of the node-local call is still there.
        assert_eq!(first.read(|tx| tx.leases_of(&owner)).unwrap().len(), 1);
    }

    /// The tables made here and those an older database got from the
    /// migrations (versions 3 and 4) must be one shape, or a query of
    /// `rows` would meet a difference; without them, a new database and a
    /// migrated one differ in nothing else.
    #[test]
    fn made_tables_are_the_migrated_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (new_path, migrated_path) = (dir.path().join("new.db"), dir.path().join("migrated.db"));
        let mut new = open(&new_path);
        drop(schema_testing::migrated(&migrated_path));
        let mut migrated = open(&migrated_path);
        assert!(!new.read(exist).unwrap());
        assert!(migrated.read(exist).unwrap());
        let shape = |path| schema_testing::shape(&rusqlite::Connection::open(path).unwrap());
        let node_local = shape(&new_path);

        make_missing(&mut new).unwrap();
        let made = shape(&new_path);
        for name in NAMES {
            assert!(made.contains_key(name) && !node_local.contains_key(name), "{name}: {made:#?}");
        }
        assert_eq!(made, shape(&migrated_path));
    }
}
