//! Exact spatial decomposition over a process group: each rank holds one block of every feature map
//! (a [`Grid`] of blocks over the spatial axes) and, before each layer that needs context, gets the
//! halo its output block needs from the ranks that own it — by point-to-point messages over the
//! [`Collective`]. The network code is the one-process code ([`Network`] with a [`Partition`]); this
//! module only moves data, so outputs and gradients equal the single-process ones up to the order
//! of floating-point sums (the forward pass is bitwise equal: every output voxel sums the same
//! products in the same order).
//!
//! Exchanges are derived from the regions alone: every rank knows every block and every need, so
//! rank `a` sends rank `b` exactly `block(a) ∩ need(b)` (halos of any width and sign, corners and
//! non-neighbours included) with no size negotiation. Pairs exchange in one global order (lower
//! rank sends first), which cannot deadlock even when sends block until received. The adjoint sends
//! the halo gradients back to their owners, who add them to their own cells in rank order.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::denoise::Denoiser;
use crate::dist::Collective;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::nn::Features;
use crate::nn::layers::partition::{
    Grid, Partition, Region, Widened, add_region, copy_between, copy_region, copy_region_of,
    widen_in_place,
};
use crate::tensor::Tensor;
use crate::tiling::TilingConfig;

/// What one rank sent and how long it spent in exchanges.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExchangeStats {
    /// Bytes this rank sent, one entry per exchange (forward gathers and adjoints, in call order).
    pub bytes_sent: Vec<u64>,
    /// Values the exchange's buffer holds beyond this rank's block, one entry per exchange: the
    /// halo a gather or widening adds, or the halo gradient an adjoint receives into.
    pub halo_values: Vec<u64>,
    /// Time spent in exchanges and rank sums.
    pub exchange_time: Duration,
}

/// One spatial denoiser call's halo traffic as this rank saw it, with the prediction from the
/// network's layers; ranks send theirs to rank 0 with the run's timings.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HaloTraffic {
    /// Ranks per spatial axis `[D, H, W]`.
    pub grid: [usize; 3],
    /// Bytes this rank sent, one entry per exchange in call order.
    pub sent: Vec<u64>,
    /// For each exchange, its layer and the bytes all ranks together send by the predicted halo
    /// volume ([`Network::halo_volumes`](crate::nn::Network::halo_volumes) × batch × 4); `None` when the denoiser gathers or crops
    /// around its network (DRUNet on sizes it pads or splits).
    pub predicted: Option<Vec<(String, u64)>>,
}

/// Where a [`SpatialDenoiser`] leaves the traffic of its last call.
pub type TrafficProbe = Arc<Mutex<Option<HaloTraffic>>>;

/// A grid of ranks over the spatial axes, exchanging halos over `comm`.
pub struct SpatialPartition<'a> {
    comm: &'a dyn Collective,
    grid: Grid,
    stats: Mutex<ExchangeStats>,
}

impl<'a> SpatialPartition<'a> {
    /// `grid` must have as many cells as `comm` has ranks.
    pub fn new(comm: &'a dyn Collective, grid: Grid) -> Result<Self> {
        Grid::given(grid.shape, comm.world_size())?;
        Ok(SpatialPartition {
            comm,
            grid,
            stats: Mutex::new(ExchangeStats::default()),
        })
    }

    /// The statistics so far, and resets them.
    pub fn take_stats(&self) -> ExchangeStats {
        std::mem::take(&mut *self.stats.lock().expect("stats lock"))
    }

    fn record(
        &self,
        bytes: u64,
        region: &Region,
        own: &Region,
        like: (usize, usize),
        since: Instant,
    ) {
        let halo = region.volume() - region.intersect(own).volume();
        let mut s = self.stats.lock().expect("stats lock");
        s.bytes_sent.push(bytes);
        s.halo_values.push((like.0 * like.1 * halo) as u64);
        s.exchange_time += since.elapsed();
    }

    /// For every pair `(a, b)`, `a < b`, that includes this rank and has something to move either
    /// way, in one global order: sends `outgoing(peer)` and hands `incoming(peer)`'s data to
    /// `receive`. The lower rank sends first. Returns the bytes sent.
    fn exchange<T: Float>(
        &self,
        outgoing: impl Fn(usize) -> Region,
        incoming: impl Fn(usize) -> Region,
        pack: impl Fn(&Region) -> Vec<T>,
        mut receive: impl FnMut(usize, &Region, Features<T>),
        like: (usize, usize),
    ) -> Result<u64> {
        let me = self.comm.rank();
        let world = self.grid.ranks();
        let mut sent = 0u64;
        for a in 0..world {
            for b in a + 1..world {
                let peer = match me {
                    m if m == a => b,
                    m if m == b => a,
                    _ => continue,
                };
                let (out, inc) = (outgoing(peer), incoming(peer));
                let send = |sent: &mut u64| -> Result<()> {
                    if !out.is_empty() {
                        let data = pack(&out);
                        let bytes: &[u8] = bytemuck::cast_slice(&data);
                        self.comm.send(peer, bytes)?;
                        *sent += bytes.len() as u64;
                    }
                    Ok(())
                };
                let mut recv = || -> Result<()> {
                    if !inc.is_empty() {
                        let bytes = self.comm.recv(peer)?;
                        let n = like.0 * like.1 * inc.volume();
                        if bytes.len() != n * std::mem::size_of::<T>() {
                            return Err(Error::shape(
                                format!("halo bytes from rank {peer}"),
                                &[n * std::mem::size_of::<T>()],
                                &[bytes.len()],
                            ));
                        }
                        let data: Vec<T> = bytemuck::pod_collect_to_vec(&bytes);
                        receive(
                            peer,
                            &inc,
                            Features {
                                batch: like.0,
                                channels: like.1,
                                dims: inc.dims(),
                                data,
                            },
                        );
                    }
                    Ok(())
                };
                if me == a {
                    send(&mut sent)?;
                    recv()?;
                } else {
                    recv()?;
                    send(&mut sent)?;
                }
            }
        }
        Ok(sent)
    }
}

impl<T: Float> Partition<T> for SpatialPartition<'_> {
    fn grid(&self) -> Grid {
        self.grid
    }

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn gather<'x>(
        &self,
        x: &'x Features<T>,
        dims: [usize; 3],
        needs: &[Region],
    ) -> Result<Cow<'x, Features<T>>> {
        let start = Instant::now();
        let me = self.comm.rank();
        let own = self.grid.block(dims, me);
        let want = needs[me].clip(dims);
        let mut out = Features::zeros(x.batch, x.channels, want.dims());
        copy_between(&mut out, &want, x, &own, &own.intersect(&want));
        let sent = self.exchange(
            |peer| own.intersect(&needs[peer].clip(dims)),
            |peer| self.grid.block(dims, peer).intersect(&want),
            |r| copy_region(x, &own, r).data,
            |_, r, f| add_region(&mut out, &want, &f, r),
            (x.batch, x.channels),
        )?;
        self.record(sent, &want, &own, (x.batch, x.channels), start);
        Ok(Cow::Owned(out))
    }

    fn widen(
        &self,
        x: &mut Features<T>,
        dims: [usize; 3],
        needs: &[Region],
    ) -> Result<Option<Widened>> {
        let start = Instant::now();
        let me = self.comm.rank();
        let own = self.grid.block(dims, me);
        let want = needs[me].clip(dims);
        if !want.contains(&own) {
            return Ok(None);
        }
        let like = (x.batch, x.channels);
        widen_in_place(x, &own, &want);
        // Sends read the block's cells, receives write halo cells: one at a time.
        let x = RefCell::new(x);
        let sent = self.exchange(
            |peer| own.intersect(&needs[peer].clip(dims)),
            |peer| self.grid.block(dims, peer).intersect(&want),
            |r| copy_region(&x.borrow(), &want, r).data,
            |_, r, f| add_region(&mut x.borrow_mut(), &want, &f, r),
            like,
        )?;
        self.record(sent, &want, &own, like, start);
        Ok(Some(Widened { own, want }))
    }

    fn gather_adjoint(
        &self,
        g: Features<T>,
        dims: [usize; 3],
        needs: &[Region],
    ) -> Result<Features<T>> {
        let start = Instant::now();
        let me = self.comm.rank();
        let own = self.grid.block(dims, me);
        let have = needs[me].clip(dims);
        if have.contains(&own) {
            // In place: the halo cells' gradients go to their owners, the owners' contributions
            // are added into this block's cells (in the same order as below, so the same sums),
            // and `g` narrows to the block, with no second block-sized buffer.
            let like = (g.batch, g.channels);
            let g = RefCell::new(g);
            let sent = self.exchange(
                |peer| self.grid.block(dims, peer).intersect(&have),
                |peer| own.intersect(&needs[peer].clip(dims)),
                |r| copy_region(&g.borrow(), &have, r).data,
                |_, r, f| add_region(&mut g.borrow_mut(), &have, &f, r),
                like,
            )?;
            let mut g = g.into_inner();
            Widened { own, want: have }.narrow(&mut g);
            self.record(sent, &have, &own, like, start);
            return Ok(g);
        }
        let mut out = Features::zeros(g.batch, g.channels, own.dims());
        copy_between(&mut out, &own, &g, &have, &own.intersect(&have));
        let sent = self.exchange(
            |peer| self.grid.block(dims, peer).intersect(&have),
            |peer| own.intersect(&needs[peer].clip(dims)),
            |r| copy_region(&g, &have, r).data,
            |_, r, f| add_region(&mut out, &own, &f, r),
            (g.batch, g.channels),
        )?;
        self.record(sent, &have, &own, (g.batch, g.channels), start);
        Ok(out)
    }

    fn sum_over_ranks(&self, grads: &mut [T]) -> Result<()> {
        let start = Instant::now();
        // Every rank's gradients, summed in rank order on every rank: identical results everywhere,
        // whatever the transport's reduction order. Gathered a chunk at a time, so a rank holds N
        // chunks, not N copies of every gradient (DRUNet's are 130 MB).
        for (k, chunk) in grads.chunks_mut(SUM_CHUNK).enumerate() {
            let all = self.comm.all_gather(bytemuck::cast_slice(chunk))?;
            chunk.iter_mut().for_each(|g| *g = T::ZERO);
            for (r, bytes) in all.iter().enumerate() {
                if bytes.len() != std::mem::size_of_val(chunk) {
                    return Err(Error::shape(
                        format!("gradient bytes from rank {r} (chunk {k})"),
                        &[std::mem::size_of_val(chunk)],
                        &[bytes.len()],
                    ));
                }
                let theirs: &[T] = match bytemuck::try_cast_slice(bytes) {
                    Ok(t) => t,
                    Err(_) => &bytemuck::pod_collect_to_vec(bytes),
                };
                chunk.iter_mut().zip(theirs).for_each(|(g, v)| *g += *v);
            }
        }
        let mut s = self.stats.lock().expect("stats lock");
        s.exchange_time += start.elapsed();
        Ok(())
    }
}

/// Gradient values summed per all-gather in [`SpatialPartition`]'s `sum_over_ranks`.
const SUM_CHUNK: usize = 1 << 20;

/// A native neural denoiser run by exact spatial decomposition: every rank denoises its block of
/// the image (halos exchanged before each layer) and the blocks are all-gathered, so every rank
/// holds the whole result — equal to the untiled network's (the "spatial (exact)" tiling).
pub struct SpatialDenoiser {
    comm: Arc<dyn Collective>,
    inner: Box<dyn Denoiser>,
    /// Ranks per spatial axis as configured (right-aligned to the image's axes); `None` = auto.
    grid: Option<Vec<usize>>,
    traffic: TrafficProbe,
}

/// Fails unless `denoiser` can run on blocks (native DnCNN or DRUNet): what "spatial" needs.
pub fn check_block_denoiser(denoiser: &dyn Denoiser) -> Result<()> {
    if denoiser.as_block_denoiser().is_none() {
        return Err(Error::config(
            "tiling.kind",
            format!(
                "\"spatial\" (exact) runs native dncnn and drunet denoisers only, not {}",
                denoiser.name()
            ),
        ));
    }
    Ok(())
}

impl SpatialDenoiser {
    /// Fails unless `inner` can run on blocks (native DnCNN or DRUNet).
    pub fn new(
        comm: Arc<dyn Collective>,
        inner: Box<dyn Denoiser>,
        config: &TilingConfig,
    ) -> Result<Self> {
        config.validate()?;
        check_block_denoiser(&*inner)?;
        Ok(SpatialDenoiser {
            comm,
            inner,
            grid: config.grid.clone(),
            traffic: TrafficProbe::default(),
        })
    }

    /// The grid for an image of spatial size `dims` with `axes` spatial axes.
    pub fn grid_for(&self, dims: [usize; 3], axes: usize) -> Result<Grid> {
        let world = self.comm.world_size();
        Grid::for_axes(self.grid.as_deref(), axes, world, dims, "tiling.grid")
    }

    /// The probe that holds the halo traffic of the last `denoise` call (shared: it outlives a
    /// denoiser boxed into a job).
    pub fn traffic_probe(&self) -> TrafficProbe {
        self.traffic.clone()
    }
}

impl Denoiser for SpatialDenoiser {
    fn name(&self) -> String {
        let grid = match &self.grid {
            Some(g) => format!("{g:?}"),
            None => "auto".into(),
        };
        format!(
            "spatial(exact, {} ranks, grid {grid}) of {}",
            self.comm.world_size(),
            self.inner.name()
        )
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        x.expect_rank("spatial denoiser", &[3, 4, 5])?;
        let block_net = self.inner.as_block_denoiser().expect("checked in new");
        let axes = x.ndim() - 2;
        let dims = crate::nn::models::drunet::dims3(x.spatial());
        let grid = self.grid_for(dims, axes)?;
        let partition = SpatialPartition::new(&*self.comm, grid)?;
        let me = self.comm.rank();
        let whole = Region::whole(dims);
        // This rank's block, cut straight from the tensor (no copy of the whole image first).
        let (batch, channels) = (x.shape()[0], x.shape()[1]);
        let xb = copy_region_of(x.data(), batch, channels, &whole, &grid.block(dims, me));
        let yb = block_net.denoise_block(&xb, dims, axes, sigma, &partition)?;
        let sent = partition.take_stats().bytes_sent;
        let predicted = block_net.halo_volumes(dims, axes, grid)?.map(|layers| {
            let per_value = (xb.batch * std::mem::size_of::<f32>()) as u64;
            layers
                .into_iter()
                .map(|(layer, values)| (layer, values as u64 * per_value))
                .collect()
        });
        *self.traffic.lock().expect("traffic lock") = Some(HaloTraffic {
            grid: grid.shape,
            sent,
            predicted,
        });
        let blocks = self.comm.all_gather(bytemuck::cast_slice(&yb.data))?;
        let c_out = block_net.out_channels();
        let mut out = Features::zeros(yb.batch, c_out, dims);
        for (r, bytes) in blocks.iter().enumerate() {
            let at = grid.block(dims, r);
            let want = yb.batch * c_out * at.volume() * std::mem::size_of::<f32>();
            if bytes.len() != want {
                return Err(Error::shape(
                    format!("denoised block bytes from rank {r}"),
                    &[want],
                    &[bytes.len()],
                ));
            }
            let f = Features {
                batch: yb.batch,
                channels: c_out,
                dims: at.dims(),
                data: bytemuck::pod_collect_to_vec(bytes),
            };
            add_region(&mut out, &whole, &f, &at);
        }
        let mut shape = x.shape().to_vec();
        shape[1] = c_out;
        Tensor::from_vec(&shape, out.data)
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::dist::testutil::on_group;
    use crate::nn::kernels::conv::testing::{dot, random_features};
    use crate::nn::{DncnnArch, DrunetArch};
    use crate::nn::{Network, TestModel, Whole};
    use rand::{RngExt, SeedableRng};

    /// Every rank's block of `x` (a whole map), run through `f` on `world` ranks over real sockets,
    /// and the blocks of the results pasted back into one map of `out_dims`.
    fn assemble<T: Float>(
        grid: Grid,
        out_dims: [usize; 3],
        blocks: Vec<Features<T>>,
    ) -> Features<T> {
        let (b, c) = (blocks[0].batch, blocks[0].channels);
        let mut out = Features::zeros(b, c, out_dims);
        for (r, f) in blocks.iter().enumerate() {
            add_region(
                &mut out,
                &Region::whole(out_dims),
                f,
                &grid.block(out_dims, r),
            );
        }
        out
    }

    fn block_of<T: Float>(x: &Features<T>, grid: Grid, rank: usize) -> Features<T> {
        copy_region(x, &Region::whole(x.dims), &grid.block(x.dims, rank))
    }

    fn grids() -> Vec<Grid> {
        [[1, 1, 1], [1, 1, 2], [1, 3, 1], [1, 1, 4], [1, 2, 2]]
            .map(|shape| Grid { shape })
            .to_vec()
    }

    fn small_drunet(dim: usize) -> Network {
        let arch = DrunetArch {
            in_channels: 1,
            out_channels: 1,
            nc: [3, 4, 5, 6],
            nb: 1,
            dim,
        };
        crate::nn::models::drunet::build_unet(
            &arch,
            &mut crate::nn::weights::source::WeightSource::random(7),
        )
        .unwrap()
    }

    fn models() -> Vec<(&'static str, Network, [usize; 3])> {
        let dncnn = crate::nn::Dncnn::random_quiet(DncnnArch {
            in_channels: 2,
            out_channels: 2,
            depth: 5,
            nf: 6,
            ..DncnnArch::default()
        })
        .unwrap();
        vec![
            ("dncnn", dncnn.network().clone(), [1, 19, 23]),
            ("drunet2d", small_drunet(2), [1, 40, 48]),
            ("drunet3d", small_drunet(3), [8, 24, 32]),
            (
                "cnn1d",
                TestModel::Cnn1d.build(2, 4, 1).unwrap(),
                [1, 1, 101],
            ),
            (
                "cnn2d",
                TestModel::Cnn2d.build(2, 4, 1).unwrap(),
                [1, 29, 31],
            ),
            (
                "cnn3d",
                TestModel::Cnn3d.build(1, 3, 1).unwrap(),
                [7, 9, 11],
            ),
            (
                "fcn2d",
                TestModel::Fcn2d.build(2, 4, 1).unwrap(),
                [1, 26, 34],
            ),
        ]
    }

    #[test]
    fn decomposed_forward_passes_equal_the_single_process_network() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for (name, net, dims) in models() {
            let x: Features = random_features(2, net.in_channels(), dims, &mut rng);
            let want = net.forward(x.clone(), dims, &Whole).unwrap();
            for grid in grids() {
                if (0..3).any(|a| grid.shape[a] > 1 && dims[a] == 1) {
                    continue;
                }
                let blocks = on_group(grid.ranks(), |comm| {
                    let partition = SpatialPartition::new(&*comm, grid).unwrap();
                    let xb = block_of(&x, grid, comm.rank());
                    net.forward(xb, dims, &partition).unwrap()
                });
                let got = assemble(grid, want.dims, blocks);
                let scale = want.data.iter().fold(0f32, |m, v| m.max(v.abs()));
                let err = got
                    .data
                    .iter()
                    .zip(&want.data)
                    .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(
                    err <= 1e-5 * scale,
                    "{name} on {:?}: max error {err} (scale {scale})",
                    grid.shape
                );
            }
        }
    }

    #[test]
    fn decomposed_gradients_equal_the_single_process_gradients_in_f64() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        for (name, net, dims) in models() {
            let net: Network<f64> = net.cast();
            let x: Features<f64> = random_features(1, net.in_channels(), dims, &mut rng);
            let out_dims = *net.shapes(dims).unwrap().last().unwrap();
            let r: Features<f64> = random_features(1, net.out_channels(), out_dims, &mut rng);
            let mut tape = net.forward_train(x.clone(), dims, &Whole).unwrap();
            let mut want_g = net.zero_grads();
            let want_gx = net
                .backward(&mut tape, r.clone(), &Whole, &mut want_g, true)
                .unwrap()
                .unwrap();
            for grid in [Grid { shape: [1, 1, 3] }, Grid { shape: [1, 2, 2] }] {
                if (0..3).any(|a| grid.shape[a] > 1 && dims[a] == 1) {
                    continue;
                }
                let results = on_group(grid.ranks(), |comm| {
                    let partition = SpatialPartition::new(&*comm, grid).unwrap();
                    let me = comm.rank();
                    let mut tape = net
                        .forward_train(block_of(&x, grid, me), dims, &partition)
                        .unwrap();
                    let taped = tape.clone();
                    let mut g = net.zero_grads();
                    let gx = net
                        .backward(&mut tape, block_of(&r, grid, me), &partition, &mut g, true)
                        .unwrap()
                        .unwrap();
                    // Inputs widened in place for their layers' backward passes are narrowed
                    // back: the tape holds its blocks again, bit for bit.
                    assert!(tape == taped, "{name}: the backward pass changed the tape");
                    // The most halo any exchange held is the memory goal's predicted "+ halos".
                    let held = partition.take_stats().halo_values.into_iter().max();
                    let predicted = net.largest_halo(dims, grid, me, true).unwrap();
                    assert_eq!(held, Some(predicted as u64), "{name}: rank {me}'s halo");
                    (gx, g)
                });
                let gx = assemble(
                    grid,
                    dims,
                    results.iter().map(|(gx, _)| gx.clone()).collect(),
                );
                let close = |a: &[f64], b: &[f64], what: &str| {
                    let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
                    let err = a.iter().zip(b).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
                    assert!(
                        err <= 1e-12 * scale.max(1.0),
                        "{name} on {:?}: {what} error {err}",
                        grid.shape
                    );
                };
                close(&gx.data, &want_gx.data, "input gradient");
                for (_, g) in &results {
                    close(&g.data, &want_g.data, "weight gradient");
                    // Every rank holds the same summed gradients, bit for bit.
                    assert_eq!(g, &results[0].1, "{name}: ranks disagree on the gradients");
                }
            }
        }
    }

    /// The bytes every layer's exchange sends, summed over ranks, equal the predicted halo volume.
    #[test]
    fn bytes_exchanged_per_layer_equal_the_predicted_halo_volume() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for (name, net, dims) in models() {
            for grid in [Grid { shape: [1, 1, 3] }, Grid { shape: [1, 2, 2] }] {
                if (0..3).any(|a| grid.shape[a] > 1 && dims[a] == 1) {
                    continue;
                }
                let x: Features = random_features(2, net.in_channels(), dims, &mut rng);
                let sent = on_group(grid.ranks(), |comm| {
                    let partition = SpatialPartition::new(&*comm, grid).unwrap();
                    net.forward(block_of(&x, grid, comm.rank()), dims, &partition)
                        .unwrap();
                    partition.take_stats().bytes_sent
                });
                let predicted = net.halo_volumes(dims, grid).unwrap();
                assert_eq!(sent[0].len(), predicted.len(), "{name}: exchanges");
                for (i, (layer, values)) in predicted.iter().enumerate() {
                    let total: u64 = sent.iter().map(|s| s[i]).sum();
                    assert_eq!(
                        total,
                        (values * 2 * 4) as u64,
                        "{name} on {:?}, layer {layer}",
                        grid.shape
                    );
                }
            }
        }
    }

    #[test]
    fn a_map_too_small_for_the_grid_is_named() {
        let net = small_drunet(2);
        let grid = Grid { shape: [1, 1, 4] };
        let errs = on_group(4, |comm| {
            let partition = SpatialPartition::new(&*comm, grid).unwrap();
            let x = Features::zeros(1, 2, grid.block([1, 32, 24], comm.rank()).dims());
            net.forward(x, [1, 32, 24], &partition)
                .unwrap_err()
                .to_string()
        });
        for e in errs {
            assert!(e.contains("m_down3") && e.contains("[1, 1, 4]"), "{e}");
        }
    }

    /// ⟨gather(x), y⟩ = ⟨x, gatherᵀ(y)⟩ summed over ranks, for random needs (halos of both signs,
    /// regions reaching past the map and past neighbours) on 1-D, 2-D and 3-D grids.
    #[test]
    fn the_halo_exchange_adjoint_passes_the_dot_test_in_f64() {
        for (case, (grid, dims)) in [
            ([1, 1, 3], [1, 1, 17]),
            ([1, 2, 2], [1, 13, 11]),
            ([2, 1, 2], [6, 5, 9]),
            ([1, 4, 1], [1, 23, 3]),
        ]
        .into_iter()
        .enumerate()
        {
            let grid = Grid { shape: grid };
            let mut rng = rand::rngs::StdRng::seed_from_u64(case as u64);
            let needs: Vec<Region> = (0..grid.ranks())
                .map(|r| {
                    let b = grid.block(dims, r);
                    let mut n = b;
                    for a in 0..3 {
                        if dims[a] > 1 {
                            n.lo[a] = b.lo[a] + rng.random_range(-4i64..2) as isize;
                            n.hi[a] =
                                (b.hi[a] + rng.random_range(-1i64..5) as isize).max(n.lo[a] + 1);
                        }
                    }
                    n
                })
                .collect();
            let x: Features<f64> = random_features(2, 3, dims, &mut rng);
            let ys: Vec<Features<f64>> = needs
                .iter()
                .map(|n| random_features(2, 3, n.clip(dims).dims(), &mut rng))
                .collect();
            let sums = on_group(grid.ranks(), |comm| {
                let partition = SpatialPartition::new(&*comm, grid).unwrap();
                let me = comm.rank();
                let xb = block_of(&x, grid, me);
                let gx = Partition::<f64>::gather(&partition, &xb, dims, &needs).unwrap();
                let aty = partition
                    .gather_adjoint(ys[me].clone(), dims, &needs)
                    .unwrap();
                (dot(&gx.data, &ys[me].data), dot(&xb.data, &aty.data))
            });
            let (l, r): (f64, f64) = sums
                .iter()
                .fold((0.0, 0.0), |(a, b), (l, r)| (a + l, b + r));
            assert!(
                (l - r).abs() <= 1e-12 * l.abs().max(1.0),
                "grid {:?}: {l} vs {r}",
                grid.shape
            );
        }
    }
}
