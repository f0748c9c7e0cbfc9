//! Where one ADD looks for an address of one family, decided from what the
//! node knows without etcd: the order of the steps that may need etcd, each
//! taken only while the ones before found nothing. Pure, so the order is
//! tested here; `Node::add` carries the steps out.

/// What the node knows of one candidate pool of the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolFacts {
    /// Free addresses in the node's blocks of its own, counted up to
    /// `headroom + 1`.
    pub free_own: usize,
    /// At or below this many free addresses the node claims the next block
    /// ahead of need.
    pub headroom: usize,
    /// The node has shared blocks in the pool.
    pub shared: bool,
    /// A claim of this node found no block of the pool left moments ago.
    pub claimed_out: bool,
}

/// One step of the search, naming the pool by its index among the
/// candidate pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A free address of the node's own blocks of the pool is handed to the
    /// allocators: no etcd request.
    Room(usize),
    /// An address granted in one of the node's shared blocks.
    GrantOwn(usize),
    /// A new block claimed (its own, handed whole to the allocators, or
    /// shared, in which an address is then granted).
    Claim(usize),
    /// An address granted in another node's shared block.
    GrantOthers(usize),
    /// An address another node lent out.
    Borrow(usize),
}

impl Step {
    /// The index of the pool the step is in.
    pub fn pool(self) -> usize {
        match self {
            Step::Room(i) | Step::GrantOwn(i) | Step::Claim(i) | Step::GrantOthers(i) | Step::Borrow(i) => i,
        }
    }
}

/// The search for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// A block to claim as well, the node's own running low.
    pub claim_ahead: Option<usize>,
}

/// `pools`: the family's candidate pools in order (index, facts). `online`:
/// etcd answered this call (or was not asked: its blocks were confirmed
/// lately). Room in any pool first, so a node with room never claims nor
/// asks etcd; then, with etcd only, each later kind of step over every
/// pool in order, so that a pool is used up cluster-wide before the next.
/// In a pool found claimed out moments ago, another node's shared block is
/// tried before a claim: the claim reads the whole pool, and would most
/// likely find it claimed out again (it is still tried, as a block may have
/// been given back since). No step: the family has no address (11
/// offline, else 100).
pub fn plan(pools: &[(usize, PoolFacts)], online: bool) -> Plan {
    if let Some(&(i, facts)) = pools.iter().find(|(_, f)| f.free_own > 0) {
        let low = online && facts.free_own <= facts.headroom;
        return Plan { steps: vec![Step::Room(i)], claim_ahead: low.then_some(i) };
    }
    if !online {
        return Plan { steps: Vec::new(), claim_ahead: None };
    }
    let mut steps: Vec<Step> = pools.iter().filter(|(_, f)| f.shared).map(|&(i, _)| Step::GrantOwn(i)).collect();
    for make in [Step::Claim as fn(usize) -> Step, Step::GrantOthers, Step::Borrow] {
        steps.extend(pools.iter().map(|&(i, f)| match (make(i), f.claimed_out) {
            (Step::Claim(i), true) => Step::GrantOthers(i),
            (Step::GrantOthers(i), true) => Step::Claim(i),
            (step, _) => step,
        }));
    }
    Plan { steps, claim_ahead: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(free_own: usize, shared: bool) -> PoolFacts {
        PoolFacts { free_own, headroom: 16, shared, claimed_out: false }
    }

    #[test]
    fn room_of_its_own_in_any_pool_needs_no_etcd_step() {
        let p = plan(&[(0, facts(0, true)), (2, facts(40, false))], true);
        assert_eq!(p, Plan { steps: vec![Step::Room(2)], claim_ahead: None });
    }

    #[test]
    fn running_low_claims_the_next_block_ahead_only_with_etcd() {
        assert_eq!(plan(&[(1, facts(3, false))], true).claim_ahead, Some(1));
        let offline = plan(&[(1, facts(3, false))], false);
        assert_eq!(offline, Plan { steps: vec![Step::Room(1)], claim_ahead: None });
    }

    #[test]
    fn without_etcd_only_room_of_its_own_serves() {
        assert!(plan(&[(0, facts(0, true)), (1, facts(0, false))], false).steps.is_empty());
    }

    #[test]
    fn shared_blocks_then_a_claim_then_others_then_lent_each_in_pool_order() {
        let p = plan(&[(0, facts(0, false)), (3, facts(0, true))], true);
        assert_eq!(
            p.steps,
            vec![
                Step::GrantOwn(3),
                Step::Claim(0),
                Step::Claim(3),
                Step::GrantOthers(0),
                Step::GrantOthers(3),
                Step::Borrow(0),
                Step::Borrow(3),
            ]
        );
        assert_eq!(p.claim_ahead, None);
    }

    #[test]
    fn a_pool_claimed_out_moments_ago_tries_others_shared_blocks_before_a_claim() {
        let out = PoolFacts { claimed_out: true, ..facts(0, true) };
        let p = plan(&[(0, out), (1, facts(0, false))], true);
        assert_eq!(
            p.steps,
            vec![
                Step::GrantOwn(0),
                Step::GrantOthers(0),
                Step::Claim(1),
                Step::Claim(0),
                Step::GrantOthers(1),
                Step::Borrow(0),
                Step::Borrow(1),
            ]
        );
    }
}
