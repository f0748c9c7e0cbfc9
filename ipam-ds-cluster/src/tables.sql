-- Cluster mode's tables at schema version 5, as the migrations V3 and V4 of
-- shared/src/store/schema.rs make them, which say what the columns are (the
-- test tables::tests::made_tables_are_the_migrated_ones compares the two). A
-- new database has none of them: cluster mode's first call on a node makes
-- them (tables::make), so that a node-local call, which never uses them, does
-- not parse them at every open. No comments inside the statements: SQLite
-- keeps a statement's text and parses it at every open.
CREATE TABLE IF NOT EXISTS cluster_blocks (network TEXT NOT NULL, pool TEXT NOT NULL, block TEXT NOT NULL, state TEXT NOT NULL,
    revision INTEGER NOT NULL, confirmed INTEGER NOT NULL, taken TEXT NOT NULL, since INTEGER NOT NULL,
    shared INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (network, pool, block)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cluster_records (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL, network TEXT NOT NULL,
    pool TEXT NOT NULL, address TEXT NOT NULL, kind TEXT NOT NULL, container_id TEXT NOT NULL, ifname TEXT NOT NULL,
    added_by TEXT, state TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS cluster_records_by_owner ON cluster_records (network, container_id, ifname);
CREATE TABLE IF NOT EXISTS cluster_notes (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
