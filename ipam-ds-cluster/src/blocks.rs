//! Block geometry: how a cluster pool is cut into blocks, in which order a
//! node tries to claim them, and the pool a node's allocators see (its
//! blocks, plus single addresses it holds elsewhere). Policy only: no etcd,
//! no disk, so it is tested on its own.

use std::net::IpAddr;

use ipnet::IpNet;
use shared::addr::{from_u128, to_u128, Family};
use shared::pool::{Pool, Range};

pub const DEFAULT_V4: u8 = 26;
pub const DEFAULT_V6: u8 = 122;

/// A cluster pool and the prefix length of its blocks.
#[derive(Debug, Clone)]
pub struct Geometry<'p> {
    pub pool: &'p Pool,
    pub block_size: u8,
    /// First addresses of the blocks that hold an address the allocators
    /// may hand out: disjoint, ascending runs of consecutive blocks.
    spans: Vec<(u128, u128)>,
}

impl<'p> Geometry<'p> {
    /// The pool's `blockSize`, or the family's default narrowed to fit the
    /// pool's smallest subnet (a /28 pool is one block by default).
    pub fn of(pool: &'p Pool) -> Geometry<'p> {
        let widest_prefix = pool.ranges.iter().map(|r| r.subnet.prefix_len()).max().unwrap_or(0);
        let default = match pool.family() {
            Family::V4 => DEFAULT_V4,
            Family::V6 => DEFAULT_V6,
        };
        let block_size = pool.block_size.unwrap_or(default.max(widest_prefix));
        let mut geometry = Geometry { pool, block_size, spans: Vec::new() };
        // From what sequential allocation may hand out (the dynamic ranges
        // minus excludes, gateways and the subnets' network and broadcast
        // addresses), not from the ranges: a block with none of it would be
        // claimed for nothing, and with it every ADD that claimed it would
        // answer 100. Computed per interval, so that an exclude covering
        // 2^50 blocks costs no more than one covering one.
        let mut spans: Vec<(u128, u128)> =
            pool.allocatable().into_iter().map(|(lo, hi)| (geometry.start_of(lo), geometry.start_of(hi))).collect();
        spans.sort_unstable();
        let len = geometry.block_len();
        for (lo, hi) in spans {
            match geometry.spans.last_mut() {
                Some(last) if lo <= last.1.saturating_add(len) => last.1 = last.1.max(hi),
                _ => geometry.spans.push((lo, hi)),
            }
        }
        geometry
    }

    fn max_len(&self) -> u8 {
        match self.pool.family() {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// Addresses in one block (saturating for a /0 IPv6 block).
    pub fn block_len(&self) -> u128 {
        1u128.checked_shl(u32::from(self.max_len() - self.block_size.min(self.max_len()))).unwrap_or(u128::MAX)
    }

    fn start_of(&self, address: IpAddr) -> u128 {
        to_u128(self.block_of(address).network())
    }

    /// The block `address` lies in (whether or not the pool hands it out).
    pub fn block_of(&self, address: IpAddr) -> IpNet {
        IpNet::new(address, self.block_size).map(|n| n.trunc()).unwrap_or_else(|_| IpNet::from(address))
    }

    /// Whether `block` is one of the pool's blocks: the right size, holding
    /// some of the dynamic range.
    pub fn is_block(&self, block: &IpNet) -> bool {
        block.prefix_len() == self.block_size && !self.block_ranges(block).is_empty()
    }

    /// The parts of the pool's ranges inside `block`, each with its range's
    /// subnet and gateway (a block is part of a subnet, not a subnet).
    pub fn block_ranges(&self, block: &IpNet) -> Vec<Range> {
        let (first, last) = (to_u128(block.network()), to_u128(block.broadcast()));
        self.pool
            .ranges
            .iter()
            .filter(|r| Family::of_net(&r.subnet) == Family::of_net(block))
            .filter_map(|r| {
                let lo = to_u128(r.range_start).max(first);
                let hi = to_u128(r.range_end).min(last);
                (lo <= hi).then(|| Range {
                    subnet: r.subnet,
                    range_start: from_u128(lo),
                    range_end: from_u128(hi),
                    gateway: r.gateway,
                })
            })
            .collect()
    }

    /// How many blocks the pool has that hold an address to hand out.
    pub fn block_count(&self) -> u128 {
        let len = self.block_len();
        self.spans.iter().map(|(lo, hi)| (hi - lo) / len + 1).sum()
    }

    fn nth_block(&self, mut n: u128) -> Option<IpNet> {
        let len = self.block_len();
        for (lo, hi) in &self.spans {
            let count = (hi - lo) / len + 1;
            if n < count {
                return IpNet::new(from_u128(lo + n * len), self.block_size).ok();
            }
            n -= count;
        }
        None
    }

    /// Every block with an address to hand out (the others are never
    /// claimed), in the order `node` tries to claim them: from a place
    /// that depends on its name, so that nodes starting together do not all
    /// race for the first block, then onwards, wrapping around.
    pub fn claim_order<'g>(&'g self, node: &str) -> impl Iterator<Item = IpNet> + 'g {
        let count = self.block_count();
        let start = if count == 0 { 0 } else { u128::from(fnv1a(node.as_bytes())) % count };
        let mut i: u128 = 0;
        std::iter::from_fn(move || {
            if i >= count {
                return None;
            }
            let n = (start + i) % count;
            i += 1;
            self.nth_block(n)
        })
    }

    /// The pool as this node's allocators see it: the parts of its `blocks`,
    /// then `singles` (addresses it holds outside them), with `taken` (held
    /// elsewhere in the cluster) excluded. `None` when that leaves no range.
    pub fn node_view(&self, blocks: &[IpNet], singles: &[IpAddr], taken: &[IpAddr]) -> Option<Pool> {
        let mut blocks = blocks.to_vec();
        blocks.sort_by_key(|b| to_u128(b.network()));
        let mut ranges: Vec<Range> = blocks.iter().flat_map(|b| self.block_ranges(b)).collect();
        for &address in singles {
            if ranges
                .iter()
                .any(|r| to_u128(r.range_start) <= to_u128(address) && to_u128(address) <= to_u128(r.range_end))
            {
                continue;
            }
            // Only what a static request could claim: a range starting at
            // the subnet's network address or the gateway is not a pool.
            if let Ok(range) = self.pool.check_static(address) {
                ranges.push(Range { range_start: address, range_end: address, ..range.clone() });
            }
        }
        if ranges.is_empty() {
            return None;
        }
        let mut exclude = self.pool.exclude.clone();
        exclude.extend(taken.iter().map(|&a| IpNet::from(a)));
        Some(Pool { ranges, exclude, matches: Default::default(), ..self.pool.clone() })
    }
}

/// FNV-1a: stable across builds and processes, unlike std's hasher.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeSet;

    fn pool(v: serde_json::Value) -> Pool {
        Pool::from_json(&v, "p").unwrap()
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn a_pool_is_cut_into_aligned_blocks_of_its_dynamic_range() {
        let p = pool(
            json!({"name": "blue", "ranges": [{"subnet": "10.22.0.0/24", "rangeStart": "10.22.0.50"}], "blockSize": 26}),
        );
        let g = Geometry::of(&p);
        assert_eq!(g.block_count(), 4, "50..254 touches all four /26");
        assert_eq!(g.block_of("10.22.0.70".parse().unwrap()), net("10.22.0.64/26"));
        let first = g.block_ranges(&net("10.22.0.0/26"));
        assert_eq!(
            (first[0].range_start.to_string(), first[0].range_end.to_string()),
            ("10.22.0.50".into(), "10.22.0.63".into())
        );
        assert_eq!(first[0].subnet, net("10.22.0.0/24"), "results keep the pool's prefix length");
        let last = g.block_ranges(&net("10.22.0.192/26"));
        assert_eq!(last[0].range_end.to_string(), "10.22.0.254", "never the broadcast address");
        assert!(!g.is_block(&net("10.22.1.0/26")));
        assert!(!g.is_block(&net("10.22.0.0/25")));
    }

    #[test]
    fn the_default_block_fits_a_small_pool() {
        let p = pool(json!({"name": "s", "ranges": [{"subnet": "10.9.0.0/28"}]}));
        assert_eq!(Geometry::of(&p).block_size, 28);
        let p6 = pool(json!({"name": "s6", "ranges": [{"subnet": "fd00:9::/64"}]}));
        let g6 = Geometry::of(&p6);
        assert_eq!(g6.block_size, DEFAULT_V6);
        assert_eq!(g6.block_count(), 1u128 << 58);
        assert_eq!(g6.claim_order("n").take(3).count(), 3, "a huge pool is walked lazily");
    }

    #[test]
    fn every_node_walks_every_block_once_from_its_own_start() {
        let p = pool(json!({"name": "b", "ranges": [{"subnet": "10.8.0.0/22"}], "blockSize": 26}));
        let g = Geometry::of(&p);
        let starts: BTreeSet<IpNet> = (0..6).filter_map(|i| g.claim_order(&format!("node-{i}")).next()).collect();
        assert!(starts.len() >= 4, "six nodes mostly start apart: {starts:?}");
        let all: BTreeSet<IpNet> = g.claim_order("node-a").collect();
        assert_eq!(all.len(), 16);
        assert!(all.iter().all(|b| g.is_block(b)));
    }

    /// Whether `g` claims `block`.
    fn claimed(g: &Geometry, block: &str) -> bool {
        g.claim_order("n").any(|b| b == net(block))
    }

    #[test]
    fn blocks_without_a_usable_address_are_never_claimed() {
        // The first half excluded: only the second half's eight /26.
        let p = pool(json!({"name": "x", "ranges": [{"subnet": "10.6.0.0/22"}], "blockSize": 26,
            "exclude": ["10.6.0.0/23"]}));
        let g = Geometry::of(&p);
        assert_eq!(g.block_count(), 8);
        assert!(g.claim_order("n").all(|b| b.network() >= "10.6.2.0".parse::<IpAddr>().unwrap()));
        // Excluded in pieces that together cover a block, and the range's
        // edge: .64/26 is .64-.95 excluded and .96-.127 outside the range.
        let p = pool(json!({"name": "x", "ranges": [{"subnet": "10.6.0.0/24", "rangeEnd": "10.6.0.95"}],
            "blockSize": 26, "exclude": ["10.6.0.64/28", "10.6.0.80/28"]}));
        let g = Geometry::of(&p);
        assert!(claimed(&g, "10.6.0.0/26") && !claimed(&g, "10.6.0.64/26"));
        // /31 blocks: the first holds the network address and the gateway,
        // the last the broadcast address and one usable address.
        let p = pool(json!({"name": "x", "ranges": [{"subnet": "10.6.0.0/24", "gateway": "10.6.0.1"}],
            "blockSize": 31}));
        let g = Geometry::of(&p);
        assert!(!claimed(&g, "10.6.0.0/31") && claimed(&g, "10.6.0.2/31") && claimed(&g, "10.6.0.254/31"));
        assert_eq!(g.block_count(), 127);
        // /32 blocks: never the network, gateway or broadcast address.
        let p = pool(json!({"name": "x", "ranges": [{"subnet": "10.6.0.0/28", "gateway": "10.6.0.9"}],
            "blockSize": 32}));
        let g = Geometry::of(&p);
        let all: BTreeSet<IpNet> = g.claim_order("n").collect();
        assert_eq!(all.len(), 13, "16 less network, gateway and broadcast: {all:?}");
        for unusable in ["10.6.0.0/32", "10.6.0.9/32", "10.6.0.15/32"] {
            assert!(!all.contains(&net(unusable)), "{unusable}");
        }
        // IPv6: the subnet-router anycast address only.
        let p6 = pool(json!({"name": "x6", "ranges": [{"subnet": "fd00:6::/64", "gateway": "fd00:6::1"}],
            "blockSize": 127}));
        assert_eq!(Geometry::of(&p6).block_count(), (1u128 << 63) - 1, "all but fd00:6::/127");
        // An exclude of 2^50 blocks is skipped at once.
        let huge = pool(json!({"name": "h", "ranges": [{"subnet": "fd00:7::/64"}], "blockSize": 122,
            "exclude": ["fd00:7::/65"]}));
        let g = Geometry::of(&huge);
        assert_eq!(g.block_count(), 1u128 << 57);
        assert!(g.claim_order("n").take(1000).all(|b| b.network() >= "fd00:7::8000:0:0:0".parse::<IpAddr>().unwrap()));
        // Nothing usable at all: nothing to claim.
        let none = pool(json!({"name": "z", "ranges": [{"subnet": "10.6.0.0/30"}], "exclude": ["10.6.0.2/32"]}));
        assert_eq!(Geometry::of(&none).claim_order("n").count(), 0);
    }

    #[test]
    fn two_ranges_in_one_subnet_share_the_block_between_them() {
        let p = pool(json!({"name": "b", "ranges": [
            {"subnet": "10.7.0.0/24", "rangeStart": "10.7.0.10", "rangeEnd": "10.7.0.20"},
            {"subnet": "10.7.0.0/24", "rangeStart": "10.7.0.30", "rangeEnd": "10.7.0.40"}], "blockSize": 27}));
        let g = Geometry::of(&p);
        assert_eq!(g.block_count(), 2);
        assert_eq!(g.block_ranges(&net("10.7.0.0/27")).len(), 2);
    }

    #[test]
    fn the_node_view_is_its_blocks_and_singles_minus_what_others_hold() {
        let p = pool(json!({"name": "blue", "ranges": [{"subnet": "10.22.0.0/24", "gateway": "10.22.0.1"}],
            "blockSize": 26, "exclude": ["10.22.0.5"], "routes": [{"dst": "0.0.0.0/0"}]}));
        let g = Geometry::of(&p);
        let view = g
            .node_view(
                &[net("10.22.0.128/26"), net("10.22.0.0/26")],
                &["10.22.0.200".parse().unwrap()],
                &["10.22.0.7".parse().unwrap()],
            )
            .unwrap();
        let bounds: Vec<String> = view.ranges.iter().map(|r| format!("{}-{}", r.range_start, r.range_end)).collect();
        assert_eq!(bounds, ["10.22.0.1-10.22.0.63", "10.22.0.128-10.22.0.191", "10.22.0.200-10.22.0.200"]);
        assert_eq!(view.exclude, vec![net("10.22.0.5/32"), net("10.22.0.7/32")]);
        assert_eq!(view.name, "blue");
        assert_eq!(view.routes, p.routes);
        let back = Pool::from_json(&view.to_json(), "prevResult.pools[0]").unwrap();
        assert_eq!(back, view, "allocators read the view as it was written");
        assert!(g.node_view(&[], &[], &[]).is_none());
        let unusable: Vec<IpAddr> = ["10.22.0.0", "10.22.0.1", "10.22.0.255"].map(|a| a.parse().unwrap()).to_vec();
        assert!(g.node_view(&[], &unusable, &[]).is_none(), "never a range of the network address or the gateway");
    }
}
