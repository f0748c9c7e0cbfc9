//! The etcd key layout, version 1. Keys are text, readable with `etcdctl get
//! --prefix`; values are JSON. A later layout gets a new version segment, so
//! that two builds never read each other's records wrongly.
//!
//! ```text
//! <prefix>/v1/<network>/<pool>/pool                  the pool's geometry (ranges, blockSize)
//! <prefix>/v1/<network>/<pool>/blocks/<block>        {"node": …, "at": …, "shared": true?}: the block is that node's
//! <prefix>/v1/<network>/<pool>/addrs/<block>/<ip>    {"kind": static|borrowed|lent|allocated, "node", "container", "ifname", "identity"?}
//! <prefix>/v1/<network>/<pool>/wanted                a node found no free address (lenders lend)
//! <prefix>/v1/<network>/_nodes/<node>                {"db": …, "offlineGrace": …, "timeout": …}: who runs as <node>
//! <prefix>/v1/<network>/_pools/<pool>                the pool's geometry again: the network's pools, checked for overlap
//! <prefix>/v1/<network>/_recovery                    {"node", "at", "from", "to"}: etcd lost history; nodes re-claim (leased)
//! <prefix>/v1/<network>/_sticky/<ifname>/<identity>  {"node", "container", "addresses", "until"?}: a workload identity's addresses
//! ```
//! Pool names start with a letter or digit, so `_nodes` and `_pools` are never pools.
//! `<block>` is the block's CIDR with `-` for `/` (`10.22.0.64-26`).

use std::net::IpAddr;

use ipnet::IpNet;

pub const VERSION: &str = "v1";

/// The keys of one pool of one network.
#[derive(Debug, Clone)]
pub struct PoolKeys {
    base: String,
}

impl PoolKeys {
    pub fn new(prefix: &str, network: &str, pool: &str) -> PoolKeys {
        PoolKeys { base: format!("{prefix}/{VERSION}/{network}/{pool}/") }
    }

    /// Everything of the pool.
    pub fn all(&self) -> &str {
        &self.base
    }

    pub fn definition(&self) -> String {
        format!("{}pool", self.base)
    }

    pub fn blocks(&self) -> String {
        format!("{}blocks/", self.base)
    }

    pub fn block(&self, block: &IpNet) -> String {
        format!("{}blocks/{}", self.base, block_segment(block))
    }

    pub fn addresses(&self) -> String {
        format!("{}addrs/", self.base)
    }

    pub fn block_addresses(&self, block: &IpNet) -> String {
        format!("{}addrs/{}/", self.base, block_segment(block))
    }

    pub fn address(&self, block: &IpNet, address: IpAddr) -> String {
        format!("{}{address}", self.block_addresses(block))
    }

    pub fn wanted(&self) -> String {
        format!("{}wanted", self.base)
    }

    /// The block a key under [`PoolKeys::blocks`] names.
    pub fn parse_block(&self, key: &[u8]) -> Option<IpNet> {
        let key = std::str::from_utf8(key).ok()?;
        parse_segment(key.strip_prefix(&self.blocks())?)
    }

    /// The block and address a key under [`PoolKeys::addresses`] names.
    pub fn parse_address(&self, key: &[u8]) -> Option<(IpNet, IpAddr)> {
        let key = std::str::from_utf8(key).ok()?;
        let (block, address) = key.strip_prefix(&self.addresses())?.split_once('/')?;
        Some((parse_segment(block)?, address.parse().ok()?))
    }
}

/// The keys of one network that belong to no pool.
#[derive(Debug, Clone)]
pub struct NetworkKeys {
    base: String,
}

impl NetworkKeys {
    pub fn new(prefix: &str, network: &str) -> NetworkKeys {
        NetworkKeys { base: format!("{prefix}/{VERSION}/{network}/") }
    }

    /// The entry of node `node`: which database runs under that name.
    pub fn node(&self, node: &str) -> String {
        format!("{}_nodes/{node}", self.base)
    }

    /// Present (under an etcd lease) while nodes re-claim their blocks after
    /// etcd lost history: no block is claimed or adopted meanwhile.
    pub fn recovery(&self) -> String {
        format!("{}_recovery", self.base)
    }

    /// The index of the network's pools, each with its geometry: a pool is
    /// defined only when it overlaps none of the others (two names over one
    /// range would each hand out its addresses).
    pub fn pools(&self) -> String {
        format!("{}_pools/", self.base)
    }

    pub fn pool(&self, pool: &str) -> String {
        format!("{}{pool}", self.pools())
    }

    /// Where workload identity `identity` (ipam-da-sticky) has its
    /// addresses on interface `ifname`: live on a node, or held for it.
    pub fn identity(&self, ifname: &str, identity: &str) -> String {
        format!("{}{ifname}/{identity}", self.identities())
    }

    /// Every identity's key.
    pub fn identities(&self) -> String {
        format!("{}_sticky/", self.base)
    }

    /// The pool a key under [`NetworkKeys::pools`] names.
    pub fn parse_pool<'k>(&self, key: &'k [u8]) -> Option<&'k str> {
        std::str::from_utf8(key).ok()?.strip_prefix(self.base.as_str())?.strip_prefix("_pools/")
    }
}

fn block_segment(block: &IpNet) -> String {
    format!("{}-{}", block.network(), block.prefix_len())
}

fn parse_segment(segment: &str) -> Option<IpNet> {
    let (address, len) = segment.split_once('-')?;
    IpNet::new(address.parse().ok()?, len.parse().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_back_as_what_they_name() {
        let keys = PoolKeys::new("/ipam-delegated", "blue-net", "blue");
        let block: IpNet = "10.22.0.64/26".parse().unwrap();
        assert_eq!(keys.block(&block), "/ipam-delegated/v1/blue-net/blue/blocks/10.22.0.64-26");
        assert_eq!(keys.parse_block(keys.block(&block).as_bytes()), Some(block));
        let addr: IpAddr = "10.22.0.70".parse().unwrap();
        assert_eq!(keys.address(&block, addr), "/ipam-delegated/v1/blue-net/blue/addrs/10.22.0.64-26/10.22.0.70");
        assert_eq!(keys.parse_address(keys.address(&block, addr).as_bytes()), Some((block, addr)));
        let v6: IpNet = "fd00:22::40/122".parse().unwrap();
        assert_eq!(keys.parse_block(keys.block(&v6).as_bytes()), Some(v6));
        assert!(keys.block_addresses(&block).starts_with(&keys.addresses()));
        assert!(!keys.block(&block).starts_with(&keys.addresses()));
    }

    #[test]
    fn pool_index_keys_name_their_pool() {
        let keys = NetworkKeys::new("/p", "net");
        assert_eq!(keys.parse_pool(keys.pool("blue").as_bytes()), Some("blue"));
        assert_eq!(keys.parse_pool(b"/p/v1/net/blue/pool"), None);
    }
}
