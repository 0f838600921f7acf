//! Distributed physics: the operators of a stack are shared round-robin among ranks (operator `i` on
//! rank `i % world`), like deepinv's `DistributedStackedLinearPhysics`.
//!
//! Each rank builds and evaluates only its own operators. Results are combined with collectives:
//! `A` gathers the measurements (three strategies, or none with `forward_local`); `Aᵀ`, `AᵀA` and the
//! fused data-fidelity gradient are sums. With [`SumOrder::Exact`] (the default) the per-operator
//! terms are gathered and summed in operator order on every rank, which reproduces the
//! single-process [`Stack`](crate::physics::Stack) bit for bit whatever the number of ranks; with
//! [`SumOrder::AllReduce`] each rank sums its own terms and a ring all-reduce adds the partial sums —
//! less traffic, and a difference from the single-process result of the order of float rounding
//! (|Δ| ≲ n_ops · 2⁻²³ · Σ|terms| per element).
//!
//! A stack of circular blurs with one kernel size shares FFTs ([`BlurFusion`]) here as in [`Stack`],
//! when every rank agrees at construction that all operators qualify. The terms change, not the
//! order: an operator's term of `Σ wᵢAᵢᵀyᵢ` is its weighted spectrum, gathered and summed in operator
//! order like an image, then transformed back once on every rank; `Σ wᵢAᵢᵀAᵢx` is one convolution
//! with the Gram kernel `Σ wᵢgᵢ`, whose parts `gᵢ` are gathered once at construction and summed in
//! operator order, so every rank applies it locally — the same bits on any number of ranks and in a
//! [`Stack`], and no communication per gradient beyond the measurement term.

use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::collective::{Collective, ReduceOp};
use super::{codec, wire};
use crate::error::{Error, Result};
use crate::physics::blur_engine::FusionKey;
use crate::physics::stack::{
    BlurFusion, check_circular_measurements, check_same_shape, sum_in_order,
};
use crate::physics::{LinearPhysics, StackedLinearPhysics};
use crate::tensor::Tensor;

/// How `A(x)` is gathered (deepinv's `gather_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GatherStrategy {
    /// One all-gather per round of local operators.
    Naive,
    /// All local results in one buffer, one all-gather.
    #[default]
    Concatenated,
    /// Each owner broadcasts each of its results.
    Broadcast,
}

/// How distributed sums are formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SumOrder {
    /// Gather the terms and sum in operator order: identical to one process.
    #[default]
    Exact,
    /// Local partial sums combined by all-reduce: less traffic, rounding-level differences.
    AllReduce,
}

/// The owner of operator `i` among `world` ranks.
pub fn owner(i: usize, world: usize) -> usize {
    i % world
}

/// A stack whose operators live on different ranks.
pub struct DistributedStack {
    comm: Arc<dyn Collective>,
    n_ops: usize,
    /// `(global index, operator)` for the operators this rank owns, in index order.
    local: Vec<(usize, Box<dyn LinearPhysics>)>,
    pub gather: GatherStrategy,
    pub sum_order: SumOrder,
    /// Shared FFTs, when every operator of the stack is a circular blur of one kernel size.
    fusion: Option<BlurFusion>,
}

impl DistributedStack {
    /// Builds this rank's share of `n_ops` operators with `factory(i)` (called only for owned `i`).
    pub fn from_factory(
        comm: Arc<dyn Collective>,
        n_ops: usize,
        mut factory: impl FnMut(usize) -> Result<Box<dyn LinearPhysics>>,
    ) -> Result<Self> {
        if n_ops == 0 {
            return Err(Error::config(
                "physics",
                "a stack needs at least one operator",
            ));
        }
        let world = comm.world_size();
        let rank = comm.rank();
        let local = (0..n_ops)
            .filter(|&i| owner(i, world) == rank)
            .map(|i| Ok((i, factory(i)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut stack = DistributedStack {
            comm,
            n_ops,
            local,
            gather: GatherStrategy::default(),
            sum_order: SumOrder::default(),
            fusion: None,
        };
        stack.fusion = stack.agree_on_fusion()?;
        Ok(stack)
    }

    /// Whether the operators share FFTs (the same answer on every rank).
    pub fn is_fused(&self) -> bool {
        self.fusion.is_some()
    }

    /// Every rank announces the fusion key of each operator it owns; fusion is on when all `n_ops`
    /// share one key. Then the Gram kernels `gᵢ` are gathered so every rank holds all of them.
    fn agree_on_fusion(&self) -> Result<Option<BlurFusion>> {
        let mine: Vec<(usize, Option<FusionKey>)> = self
            .local
            .iter()
            .map(|(i, op)| (*i, BlurFusion::key_of(op.as_ref())))
            .collect();
        let mut keys = vec![None; self.n_ops];
        let parts = self.comm.all_gather(&wire::encode(&mine)?)?;
        for (rank, part) in parts.iter().enumerate() {
            for (i, key) in decode_fusion_keys(rank, part, self.n_ops)? {
                keys[i] = key;
            }
        }
        let Some(key) = keys[0].filter(|_| keys.iter().all(|k| *k == keys[0])) else {
            return Ok(None);
        };
        let grams = if BlurFusion::gram_fits(key) {
            let local = self
                .local
                .par_iter()
                .map(|(i, op)| {
                    BlurFusion::gram_of(op.as_ref())
                        .map(|g| (*i, g))
                        .ok_or_else(|| Error::Internal("a fused blur without a Gram kernel".into()))
                })
                .collect::<Result<Vec<_>>>()?;
            Some(self.gather_indexed(local)?)
        } else {
            None
        };
        Ok(Some(BlurFusion::new(key, grams)))
    }

    /// `Σ wᵢAᵢᵀyᵢ` with shared inverse transforms (fused stacks).
    fn fused_adjoint(&self, f: &BlurFusion, ys: &[Tensor], weights: &[f32]) -> Result<Tensor> {
        check_same_shape(ys)?;
        if self.comm.world_size() == 1 {
            // Accumulating in operator order gives the bits of the gathered sum, without storing terms.
            let ops: Vec<&dyn LinearPhysics> =
                self.local.iter().map(|(_, op)| op.as_ref()).collect();
            return f.adjoint_all(&ops, ys, weights);
        }
        let finish = |sum: Tensor| f.adjoint_finish(sum, ys[0].shape());
        self.distributed_sum(
            |i, op| f.adjoint_term(op, &ys[i], weights[i]),
            Some(&finish),
        )
    }

    /// Distributes a list of operators: rank keeps those it owns and drops the rest.
    pub fn from_list(comm: Arc<dyn Collective>, ops: Vec<Box<dyn LinearPhysics>>) -> Result<Self> {
        let n = ops.len();
        let mut slots: Vec<Option<Box<dyn LinearPhysics>>> = ops.into_iter().map(Some).collect();
        Self::from_factory(comm, n, |i| {
            Ok(slots[i].take().expect("each operator is taken once"))
        })
    }

    /// Global indices of the operators on this rank.
    pub fn local_indices(&self) -> Vec<usize> {
        self.local.iter().map(|(i, _)| *i).collect()
    }

    pub fn comm(&self) -> &Arc<dyn Collective> {
        &self.comm
    }

    /// `A(x)` for this rank's operators only (`gather = false`).
    pub fn forward_local(&self, x: &Tensor) -> Result<Vec<(usize, Tensor)>> {
        if let Some(f) = &self.fusion {
            let ops: Vec<&dyn LinearPhysics> =
                self.local.iter().map(|(_, op)| op.as_ref()).collect();
            if let Some(ys) = f.forward(&ops, x)? {
                return Ok(self.local.iter().map(|(i, _)| *i).zip(ys).collect());
            }
        }
        self.local
            .par_iter()
            .map(|(i, op)| Ok((*i, op.forward(x)?)))
            .collect()
    }

    /// Gathers per-operator tensors from every rank into a global, index-ordered list (every rank
    /// gets every operator's; the device ranks stage their terms through it too).
    pub fn gather_indexed(&self, local: Vec<(usize, Tensor)>) -> Result<Vec<Tensor>> {
        let (world, me) = (self.comm.world_size(), self.comm.rank());
        let mut slots: Vec<Option<Tensor>> = vec![None; self.n_ops];
        if world == 1 {
            // Nothing to exchange: skip the encoding round trip.
            for (i, t) in local {
                place(&mut slots, i, t, Sender::Me)?;
            }
            return slots
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    t.ok_or_else(|| Error::Internal(format!("no result for operator {i}")))
                })
                .collect();
        }
        match self.gather {
            GatherStrategy::Concatenated => {
                let refs: Vec<(usize, &Tensor)> = local.iter().map(|(i, t)| (*i, t)).collect();
                for (rank, part) in self
                    .comm
                    .all_gather(&codec::encode(&refs)?)?
                    .iter()
                    .enumerate()
                {
                    for (i, t) in codec::decode(rank, part)? {
                        place(&mut slots, i, t, Sender::of(rank, me))?;
                    }
                }
            }
            GatherStrategy::Naive => {
                // Round k gathers every rank's k-th local result (ranks with fewer send nothing).
                let rounds = self.n_ops.div_ceil(world);
                for k in 0..rounds {
                    let mine: Vec<(usize, &Tensor)> =
                        local.get(k).map(|(i, t)| (*i, t)).into_iter().collect();
                    let parts = self.comm.all_gather(&codec::encode(&mine)?)?;
                    for (rank, part) in parts.iter().enumerate() {
                        for (i, t) in codec::decode(rank, part)? {
                            place(&mut slots, i, t, Sender::of(rank, me))?;
                        }
                    }
                }
            }
            GatherStrategy::Broadcast => {
                let mut mine = local.into_iter();
                for i in 0..self.n_ops {
                    let root = owner(i, world);
                    let mut buf = if root == self.comm.rank() {
                        let (j, t) = mine
                            .next()
                            .ok_or_else(|| Error::Internal("local results out of step".into()))?;
                        codec::encode(&[(j, &t)])?
                    } else {
                        Vec::new()
                    };
                    self.comm.broadcast(&mut buf, root)?;
                    for (j, t) in codec::decode(root, &buf)? {
                        place(&mut slots, j, t, Sender::of(root, me))?;
                    }
                }
            }
        }
        slots
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                // Every rank sends the results of the operators it owns, so a missing one is its
                // owner's bad data.
                t.ok_or_else(|| match Sender::of(owner(i, world), me) {
                    Sender::Me => Error::Internal(format!("no result for operator {i}")),
                    Sender::Peer(rank) => {
                        Error::bad_peer_data(rank, format!("sent no result for operator {i}"))
                    }
                })
            })
            .collect()
    }

    /// Σ over all operators of per-operator terms computed locally by `term`, then `finish`ed (a
    /// linear map, so finishing each rank's partial sum before the all-reduce is the same sum).
    fn distributed_sum(
        &self,
        term: impl Fn(usize, &dyn LinearPhysics) -> Result<Tensor> + Sync,
        finish: Option<&dyn Fn(Tensor) -> Result<Tensor>>,
    ) -> Result<Tensor> {
        let finish = |t: Tensor| match finish {
            Some(f) => f(t),
            None => Ok(t),
        };
        let local: Vec<(usize, Tensor)> = self
            .local
            .par_iter()
            .map(|(i, op)| Ok((*i, term(*i, op.as_ref())?)))
            .collect::<Result<_>>()?;
        match self.sum_order {
            SumOrder::Exact => finish(sum_in_order(self.gather_indexed(local)?)?),
            SumOrder::AllReduce => {
                let partial = match local.is_empty() {
                    true => None,
                    false => Some(finish(sum_in_order(
                        local.into_iter().map(|(_, t)| t).collect(),
                    )?)?),
                };
                // Ranks without operators still need the shape of the sum.
                let shape = self.agree_on_shape(partial.as_ref().map(|t| t.shape().to_vec()))?;
                let mut buf = partial.unwrap_or_else(|| Tensor::zeros(&shape));
                self.comm.all_reduce(buf.data_mut(), ReduceOp::Sum)?;
                Ok(buf)
            }
        }
    }

    /// The shape of a sum when some ranks own no operator: taken from the lowest rank that has one.
    fn agree_on_shape(&self, mine: Option<Vec<usize>>) -> Result<Vec<usize>> {
        wire::all_gather_as(self.comm.as_ref(), "shape of a sum", &mine)?
            .into_iter()
            .flatten()
            .next()
            .ok_or_else(|| Error::Internal("no rank owns an operator of the stack".into()))
    }

    fn check_len(&self, ys: &[Tensor], op: &str) -> Result<()> {
        if ys.len() != self.n_ops {
            return Err(Error::config(
                op,
                format!(
                    "the stack has {} operators but {} measurements were given",
                    self.n_ops,
                    ys.len()
                ),
            ));
        }
        Ok(())
    }

    /// deepinv's local upper bound of ‖A‖²: Σᵢ ‖Aᵢ‖² (each computed by its owner). Cheap, but only an
    /// upper bound of the stacked operator's ‖A‖² = λ_max(Σ AᵢᵀAᵢ).
    pub fn op_norm_sq_upper_bound(&self, x_shape: &[usize]) -> Result<f64> {
        let mut local = [0f32; 1];
        let mut total = 0f64;
        for (_, op) in &self.local {
            total += op.op_norm_sq(x_shape)?;
        }
        local[0] = total as f32;
        self.comm.all_reduce(&mut local, ReduceOp::Sum)?;
        Ok(local[0] as f64)
    }

    /// deepinv's local approximation of A†: the mean over operators of Aᵢ†yᵢ, each computed by its owner.
    /// Exact only when all operators agree; [`StackedLinearPhysics::pinv`] is the exact distributed CG.
    pub fn pinv_local_average(&self, ys: &[Tensor]) -> Result<Tensor> {
        self.check_len(ys, "pinv")?;
        let mut sum = self.distributed_sum(|i, op| op.pinv(&ys[i]), None)?;
        sum.scale(1.0 / self.n_ops as f32);
        Ok(sum)
    }
}

/// Rank `from`'s fusion keys (`(operator index, key)` of the operators it owns), read from its bytes:
/// anything that does not decode, an index out of range or a key no convolution has is its bad data.
fn decode_fusion_keys(
    from: usize,
    bytes: &[u8],
    n_ops: usize,
) -> Result<Vec<(usize, Option<FusionKey>)>> {
    let keys: Vec<(usize, Option<FusionKey>)> = wire::decode_from(from, "fusion keys", bytes)?;
    for (i, key) in &keys {
        if *i >= n_ops {
            return Err(Error::bad_peer_data(
                from,
                format!("operator {i} of {n_ops}"),
            ));
        }
        if let Some(key) = key {
            key.check().map_err(|e| Error::bad_peer_data(from, e))?;
        }
    }
    Ok(keys)
}

/// Puts operator `i`'s result, which rank `from` sent, in its slot. An index out of range or one
/// that arrives twice is that rank's bad data (this rank's own, when `from` is this rank, a bug).
fn place(slots: &mut [Option<Tensor>], i: usize, t: Tensor, from: Sender) -> Result<()> {
    let n = slots.len();
    let slot = slots
        .get_mut(i)
        .ok_or_else(|| from.error(format!("operator index {i} out of range ({n} operators)")))?;
    if slot.is_some() {
        return Err(from.error(format!("operator {i} arrived twice")));
    }
    *slot = Some(t);
    Ok(())
}

/// Who sent a result to [`place`]: this rank (a wrong index is a bug here) or a peer (its data).
#[derive(Clone, Copy)]
enum Sender {
    Me,
    Peer(usize),
}

impl Sender {
    fn of(rank: usize, me: usize) -> Sender {
        match rank == me {
            true => Sender::Me,
            false => Sender::Peer(rank),
        }
    }

    fn error(self, what: String) -> Error {
        match self {
            Sender::Me => Error::Internal(format!("gathering operator results: {what}")),
            Sender::Peer(rank) => Error::bad_peer_data(rank, what),
        }
    }
}

impl StackedLinearPhysics for DistributedStack {
    fn len(&self) -> usize {
        self.n_ops
    }

    fn names(&self) -> Vec<String> {
        // Names are small: gather them so every rank can report the whole stack.
        let mine: Vec<(usize, String)> = self.local.iter().map(|(i, op)| (*i, op.name())).collect();
        let mut names = vec![String::new(); self.n_ops];
        if let Ok(parts) = wire::all_gather_as(self.comm.as_ref(), "operator names", &mine) {
            for (i, name) in parts.into_iter().flatten() {
                if let Some(slot) = names.get_mut(i) {
                    *slot = name;
                }
            }
        }
        names
    }

    fn output_shapes(&self, x_shape: &[usize]) -> Result<Vec<Vec<usize>>> {
        // Every rank joins the gather even when its own operators fail, so that all ranks fail
        // together, on the first failing rank's error, instead of leaving the others waiting.
        let mine: Result<Vec<(usize, Vec<usize>)>> = self
            .local
            .iter()
            .map(|(i, op)| Ok((*i, op.output_shape(x_shape)?)))
            .collect();
        let (mine, mut my_error) = match mine {
            Ok(shapes) => (Ok(shapes), None),
            Err(e) => (Err(e.to_string()), Some(e)),
        };
        let mut shapes: Vec<Option<Vec<usize>>> = vec![None; self.n_ops];
        let parts = wire::all_gather_as(self.comm.as_ref(), "output shapes", &mine)?;
        for (rank, part) in parts.into_iter().enumerate() {
            // The first failing rank's error, as that rank has it (a config error stays one on
            // the rank that made it; the others learn that the peer failed and why).
            let part = part.map_err(|reason| match my_error.take() {
                Some(e) if rank == self.comm.rank() => e,
                _ => Error::PeerFailed { rank, reason },
            })?;
            for (i, shape) in part {
                if let Some(slot) = shapes.get_mut(i) {
                    *slot = Some(shape);
                }
            }
        }
        shapes
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let owner = owner(i, self.comm.world_size());
                s.ok_or_else(|| {
                    Sender::of(owner, self.comm.rank())
                        .error(format!("no output shape for operator {i}"))
                })
            })
            .collect()
    }

    fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        let local = self.forward_local(x)?;
        self.gather_indexed(local)
    }

    fn measure(&self, x: &Tensor, seed: u64) -> Result<Vec<Tensor>> {
        let local = self
            .local
            .par_iter()
            .map(|(i, op)| Ok((*i, op.measure(x, seed.wrapping_add(*i as u64))?)))
            .collect::<Result<Vec<_>>>()?;
        self.gather_indexed(local)
    }

    fn adjoint(&self, ys: &[Tensor]) -> Result<Tensor> {
        self.check_len(ys, "stack adjoint")?;
        if let Some(f) = &self.fusion {
            return self.fused_adjoint(f, ys, &vec![1.0; ys.len()]);
        }
        self.distributed_sum(|i, op| op.adjoint(&ys[i]), None)
    }

    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
        // The Gram kernel covers the whole stack: every rank applies it, no communication.
        if let Some(f) = &self.fusion
            && let Some(g) = f.gram_apply(x, &vec![1.0; self.n_ops])?
        {
            return Ok(g);
        }
        self.distributed_sum(|_, op| op.adjoint_forward(x), None)
    }

    fn shifted_normal_inverse(&self, r: &Tensor, a: f32) -> Result<Option<Tensor>> {
        // The Gram kernel covers the whole stack and `r` is replicated: no communication.
        match &self.fusion {
            Some(f) => f.shifted_normal_inverse(r, a),
            None => Ok(None),
        }
    }

    fn residual_adjoint(&self, x: &Tensor, ys: &[Tensor], weights: &[f32]) -> Result<Tensor> {
        self.check_len(ys, "data fidelity gradient")?;
        if weights.len() != self.n_ops {
            // The weights come from `fidelity`, one per operator: a mismatch is a bug.
            return Err(Error::Internal(format!(
                "data fidelity gradient: {} weights for a stack of {} operators",
                weights.len(),
                self.n_ops
            )));
        }
        if let Some(f) = &self.fusion {
            check_circular_measurements(x, ys)?;
            if let Some(mut g) = f.gram_apply(x, weights)? {
                g.sub_assign(&self.fused_adjoint(f, ys, weights)?);
                return Ok(g);
            }
        }
        let term = |i: usize, op: &dyn LinearPhysics| {
            let mut r = op.forward(x)?;
            if r.shape() != ys[i].shape() {
                return Err(Error::shape(
                    "data fidelity gradient",
                    r.shape(),
                    ys[i].shape(),
                ));
            }
            r.sub_assign(&ys[i]);
            r.scale(weights[i]);
            op.adjoint(&r)
        };
        self.distributed_sum(term, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::testutil::on_group;
    use crate::physics::{Physics, Stack};

    /// A small non-symmetric linear operator for tests: y[j] = Σ_k w[(j+k) % 5]·x[(j·3+k) % n].
    struct Mix {
        w: [f32; 5],
    }

    impl Physics for Mix {
        fn name(&self) -> String {
            format!("mix{:?}", self.w)
        }
        fn output_shape(&self, x: &[usize]) -> Result<Vec<usize>> {
            Ok(x.to_vec())
        }
        fn forward(&self, x: &Tensor) -> Result<Tensor> {
            let n = x.numel();
            let mut y = x.zeros_like();
            for j in 0..n {
                y.data_mut()[j] = (0..5)
                    .map(|k| self.w[(j + k) % 5] * x.data()[(j * 3 + k) % n])
                    .sum();
            }
            Ok(y)
        }
    }

    impl LinearPhysics for Mix {
        fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
            let n = y.numel();
            let mut x = y.zeros_like();
            for j in 0..n {
                for k in 0..5 {
                    x.data_mut()[(j * 3 + k) % n] += self.w[(j + k) % 5] * y.data()[j];
                }
            }
            Ok(x)
        }
    }

    fn ops(n: usize) -> Vec<Box<dyn LinearPhysics>> {
        (0..n)
            .map(|i| {
                let w = std::array::from_fn(|k| ((i * 7 + k * 3) % 11) as f32 / 7.0 - 0.6);
                Box::new(Mix { w }) as Box<dyn LinearPhysics>
            })
            .collect()
    }

    fn x() -> Tensor {
        Tensor::from_fn(&[1, 1, 7, 9], |i| ((i * 37) % 23) as f32 / 23.0)
    }

    #[test]
    fn n_ranks_equal_one_process_bitwise() {
        let n_ops = 5;
        let single = Stack::new(ops(n_ops)).unwrap();
        let ys = single.forward(&x()).unwrap();
        let ys_shifted: Vec<Tensor> = ys.iter().map(|y| y.scaled(0.5)).collect();
        let want = (
            single.adjoint(&ys).unwrap(),
            single.adjoint_forward(&x()).unwrap(),
            single
                .residual_adjoint(&x(), &ys_shifted, &[0.5, 1.0, 2.0, 1.0, 0.25])
                .unwrap(),
            single.pinv(&ys).unwrap(),
            single.op_norm_sq(x().shape()).unwrap(),
        );
        for world in [1, 2, 3, 7] {
            for gather in [
                GatherStrategy::Naive,
                GatherStrategy::Concatenated,
                GatherStrategy::Broadcast,
            ] {
                let results = on_group(world, |comm| {
                    let mut d = DistributedStack::from_list(comm, ops(n_ops)).unwrap();
                    d.gather = gather;
                    (
                        d.forward(&x()).unwrap(),
                        d.adjoint(&ys).unwrap(),
                        d.adjoint_forward(&x()).unwrap(),
                        d.residual_adjoint(&x(), &ys_shifted, &[0.5, 1.0, 2.0, 1.0, 0.25])
                            .unwrap(),
                        d.pinv(&ys).unwrap(),
                        d.op_norm_sq(x().shape()).unwrap(),
                    )
                });
                for (rank, r) in results.into_iter().enumerate() {
                    let ctx = format!("world {world}, {gather:?}, rank {rank}");
                    assert_eq!(r.0, ys, "{ctx}: forward");
                    assert_eq!(r.1, want.0, "{ctx}: adjoint");
                    assert_eq!(r.2, want.1, "{ctx}: AᵀA");
                    assert_eq!(r.3, want.2, "{ctx}: residual adjoint");
                    assert_eq!(r.4, want.3, "{ctx}: pinv");
                    assert_eq!(r.5, want.4, "{ctx}: ‖A‖²");
                }
            }
        }
    }

    #[test]
    fn all_reduce_order_is_close_and_ranks_without_operators_work() {
        let single = Stack::new(ops(2)).unwrap();
        let ys = single.forward(&x()).unwrap();
        let want = single.adjoint(&ys).unwrap();
        let results = on_group(3, |comm| {
            let mut d = DistributedStack::from_list(comm, ops(2)).unwrap();
            d.sum_order = SumOrder::AllReduce;
            let local = d.local_indices();
            (
                local,
                d.adjoint(&ys).unwrap(),
                d.forward_local(&x()).unwrap().len(),
            )
        });
        assert_eq!(results[2].0, Vec::<usize>::new(), "rank 2 owns nothing");
        for (_, adj, _) in &results {
            assert!(adj.max_abs_diff(&want) <= 1e-5 * want.min_max().1.abs().max(1.0));
        }
        assert_eq!(
            results.iter().map(|r| r.2).collect::<Vec<_>>(),
            vec![1, 1, 0]
        );
    }

    fn blurs(n: usize) -> Vec<Box<dyn LinearPhysics>> {
        use crate::physics::blur::{Blur, ConvMethod, Padding, gaussian_kernel};
        (0..n)
            .map(|i| {
                let k = gaussian_kernel([1.6, 0.7], 40.0 * i as f32);
                Box::new(Blur::with_method(k, Padding::Circular, ConvMethod::Fft).unwrap())
                    as Box<dyn LinearPhysics>
            })
            .collect()
    }

    /// Fused blur stacks: the terms are spectra and a Gram kernel, summed in operator order, so any
    /// number of ranks gives the single-process stack's bits (in `exact` order).
    #[test]
    fn fused_blur_stack_is_identical_on_any_number_of_ranks() {
        let n_ops = 5;
        let x = Tensor::from_fn(&[1, 3, 13, 17], |i| ((i * 37) % 23) as f32 / 23.0);
        let single = Stack::new(blurs(n_ops)).unwrap();
        assert!(single.is_fused());
        let ys: Vec<Tensor> = single
            .forward(&x.scaled(0.8))
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(i, y)| y.scaled(1.0 + 0.1 * i as f32))
            .collect();
        let w = [0.5, 1.0, 2.0, 1.0, 0.25];
        let want = (
            single.forward(&x).unwrap(),
            single.adjoint(&ys).unwrap(),
            single.adjoint_forward(&x).unwrap(),
            single.residual_adjoint(&x, &ys, &w).unwrap(),
        );
        for world in [1, 2, 3, 7] {
            let results = on_group(world, |comm| {
                let d = DistributedStack::from_list(comm, blurs(n_ops)).unwrap();
                (
                    d.is_fused(),
                    d.forward(&x).unwrap(),
                    d.adjoint(&ys).unwrap(),
                    d.adjoint_forward(&x).unwrap(),
                    d.residual_adjoint(&x, &ys, &w).unwrap(),
                )
            });
            for (rank, r) in results.into_iter().enumerate() {
                let ctx = format!("world {world}, rank {rank}");
                assert!(r.0, "{ctx}: fused");
                assert_eq!(r.1, want.0, "{ctx}: forward");
                assert_eq!(r.2, want.1, "{ctx}: adjoint");
                assert_eq!(r.3, want.2, "{ctx}: AᵀA");
                assert_eq!(r.4, want.3, "{ctx}: residual adjoint");
            }
        }
        // All-reduce order: close, and still fused.
        let results = on_group(3, |comm| {
            let mut d = DistributedStack::from_list(comm, blurs(n_ops)).unwrap();
            d.sum_order = SumOrder::AllReduce;
            d.adjoint(&ys).unwrap()
        });
        for adj in results {
            assert!(adj.max_abs_diff(&want.1) <= 1e-5 * want.1.min_max().1.abs().max(1.0));
        }
        // One operator that is not a blur turns fusion off on every rank.
        let results = on_group(2, |comm| {
            let mut list = blurs(3);
            list.extend(ops(1));
            DistributedStack::from_list(comm, list).unwrap().is_fused()
        });
        assert_eq!(results, vec![false, false]);
    }

    #[test]
    fn upper_bound_is_at_least_the_norm() {
        let results = on_group(2, |comm| {
            let d = DistributedStack::from_list(comm, ops(4)).unwrap();
            (
                d.op_norm_sq(x().shape()).unwrap(),
                d.op_norm_sq_upper_bound(x().shape()).unwrap(),
            )
        });
        for (norm, bound) in results {
            assert!(bound >= norm * (1.0 - 1e-4), "{bound} < {norm}");
        }
    }

    /// Rank 0 of a group of two whose peer's contributions to `all_gather` are scripted bytes.
    struct ScriptedPeer {
        peer_parts: std::sync::Mutex<std::collections::VecDeque<Vec<u8>>>,
    }

    impl Collective for ScriptedPeer {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            2
        }
        fn all_reduce(&self, _: &mut [f32], _: ReduceOp) -> Result<()> {
            Err(Error::Internal("not scripted".into()))
        }
        fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
            let peer = self.peer_parts.lock().unwrap().pop_front();
            let peer = peer.ok_or_else(|| Error::Internal("script exhausted".into()))?;
            Ok(vec![local.to_vec(), peer])
        }
        fn broadcast(&self, _: &mut Vec<u8>, _: usize) -> Result<()> {
            Err(Error::Internal("not scripted".into()))
        }
        fn barrier(&self) -> Result<()> {
            Ok(())
        }
        fn send(&self, _: usize, _: &[u8]) -> Result<()> {
            Err(Error::Internal("not scripted".into()))
        }
        fn recv(&self, _: usize) -> Result<Vec<u8>> {
            Err(Error::Internal("not scripted".into()))
        }
        fn transport(&self) -> crate::dist::collective::Transport {
            crate::dist::collective::Transport::Single
        }
    }

    /// Rank 1 answers the fusion-key round with no keys, then sends `results` as its operators'
    /// results for one concatenated gather of a two-operator stack.
    fn gather_from_peer(results: &[(usize, &Tensor)]) -> Result<Vec<Tensor>> {
        let no_keys: Vec<(usize, Option<FusionKey>)> = Vec::new();
        let comm = ScriptedPeer {
            peer_parts: std::sync::Mutex::new(
                [
                    wire::encode(&no_keys).unwrap(),
                    codec::encode(results).unwrap(),
                ]
                .into(),
            ),
        };
        let mut stack =
            DistributedStack::from_factory(Arc::new(comm), 2, |i| Ok(ops(2).swap_remove(i)))?;
        stack.gather = GatherStrategy::Concatenated;
        stack.forward(&x())
    }

    #[test]
    fn a_peers_duplicate_missing_or_stray_result_is_its_bad_data() {
        let y = x();
        let peer_is_named = |r: Result<Vec<Tensor>>| match r {
            Err(Error::BadPeerData { rank: 1, what }) => what,
            other => panic!("expected BadPeerData from rank 1, got {other:?}"),
        };
        // Operator 0 is rank 0's own: the peer sending it too is its mistake.
        let what = peer_is_named(gather_from_peer(&[(0, &y)]));
        assert!(what.contains("operator 0 arrived twice"), "{what}");
        let what = peer_is_named(gather_from_peer(&[(7, &y)]));
        assert!(what.contains("out of range"), "{what}");
        let what = peer_is_named(gather_from_peer(&[]));
        assert!(what.contains("no result for operator 1"), "{what}");
        // Its own operator's result is accepted.
        assert_eq!(gather_from_peer(&[(1, &y)]).unwrap().len(), 2);
    }

    fn a_key() -> FusionKey {
        FusionKey {
            kdims: [1, 9, 7],
            channels: 3,
            method: crate::physics::blur::ConvMethod::Fft,
        }
    }

    #[test]
    fn fusion_keys_travel_as_typed_values_and_impossible_ones_are_bad_data() {
        let keys = vec![(0, Some(a_key())), (2, None)];
        let bytes = wire::encode(&keys).unwrap();
        assert_eq!(decode_fusion_keys(1, &bytes, 3).unwrap(), keys);
        let out_of_range = wire::encode(&vec![(3usize, Some(a_key()))]).unwrap();
        let no_kernels = FusionKey {
            channels: 0,
            ..a_key()
        };
        let too_wide = FusionKey {
            kdims: [1, 1, crate::physics::blur::MAX_KERNEL_SIDE + 1],
            ..a_key()
        };
        for bad in [
            out_of_range,
            wire::encode(&vec![(0usize, Some(no_kernels))]).unwrap(),
            wire::encode(&vec![(0usize, Some(too_wide))]).unwrap(),
        ] {
            let e = decode_fusion_keys(1, &bad, 3).unwrap_err();
            assert!(matches!(e, Error::BadPeerData { rank: 1, .. }), "{e}");
        }
    }

    proptest::proptest! {
        /// Every prefix of a valid message, and arbitrary bytes, decode to the keys or to the
        /// sender's bad data: never a panic.
        #[test]
        fn truncated_or_random_fusion_keys_are_the_senders_bad_data(
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let keys = vec![(0usize, Some(a_key())), (1, None), (2, Some(a_key()))];
            let bytes = wire::encode(&keys).unwrap();
            let cut = cut.index(bytes.len());
            let e = decode_fusion_keys(4, &bytes[..cut], 3).unwrap_err();
            proptest::prop_assert!(matches!(e, Error::BadPeerData { rank: 4, .. }), "{}", e);
            if let Err(e) = decode_fusion_keys(4, &noise, 3) {
                proptest::prop_assert!(matches!(e, Error::BadPeerData { rank: 4, .. }), "{}", e);
            }
        }
    }
}
