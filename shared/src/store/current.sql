-- The schema at version 7 (SCHEMA_VERSION in schema.rs), as a new database
-- is made (build.rs builds one with it, which the plugins write as it is):
-- the tables, columns, keys and indexes the migrations V1 to V7 of
-- schema.rs make, which say what the columns are, but for cluster mode's
-- tables, which ipam-ds-cluster makes at its first call on a node (its
-- tables.sql; the tests a_new_database_has_the_migrated_schema and
-- made_tables_are_the_migrated_ones compare the two). No comments
-- inside the statements: SQLite keeps a statement's text and parses it at
-- every open.
PRAGMA application_id = 1229999428; -- 0x49504D44, "IPMD": APPLICATION_ID
CREATE TABLE pools (network TEXT NOT NULL, name TEXT NOT NULL, family TEXT NOT NULL, subnets TEXT NOT NULL,
    definition TEXT NOT NULL, cursor TEXT, PRIMARY KEY (network, name)) WITHOUT ROWID;
CREATE TABLE leases (key BLOB PRIMARY KEY NOT NULL, address TEXT NOT NULL, pool TEXT NOT NULL, network TEXT NOT NULL,
    container_id TEXT NOT NULL, ifname TEXT NOT NULL, since INTEGER NOT NULL, added_by TEXT, identity TEXT,
    held_until INTEGER, taken_hold_until INTEGER) WITHOUT ROWID;
CREATE INDEX leases_by_owner ON leases (network, container_id, ifname);
CREATE INDEX leases_by_pool ON leases (network, pool);
CREATE INDEX leases_by_identity ON leases (network, identity, ifname) WHERE identity IS NOT NULL;
CREATE INDEX leases_held ON leases (held_until) WHERE held_until IS NOT NULL;
CREATE TABLE leased_runs (first BLOB PRIMARY KEY NOT NULL, last BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE pool_subnets (first BLOB NOT NULL, network TEXT NOT NULL, name TEXT NOT NULL, last BLOB NOT NULL,
    PRIMARY KEY (first, network, name)) WITHOUT ROWID;
CREATE INDEX pool_subnets_by_pool ON pool_subnets (network, name);
CREATE TABLE lease_sharers (network TEXT NOT NULL, container_id TEXT NOT NULL, ifname TEXT NOT NULL,
    key BLOB NOT NULL, since INTEGER NOT NULL, added_by TEXT, PRIMARY KEY (network, container_id, ifname, key))
    WITHOUT ROWID;
CREATE INDEX lease_sharers_by_key ON lease_sharers (key);
CREATE TABLE attachment_pods (network TEXT NOT NULL, container_id TEXT NOT NULL, ifname TEXT NOT NULL,
    pod_namespace TEXT NOT NULL, pod_name TEXT NOT NULL, pod_uid TEXT, added INTEGER NOT NULL,
    PRIMARY KEY (network, container_id, ifname)) WITHOUT ROWID;
CREATE TABLE network_configs (network TEXT PRIMARY KEY NOT NULL, config TEXT NOT NULL, since INTEGER NOT NULL)
    WITHOUT ROWID;
PRAGMA user_version = 7;
