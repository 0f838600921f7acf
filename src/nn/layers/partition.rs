//! Where a network's feature maps live: whole on one process, or split into blocks over a grid of
//! ranks (exact spatial decomposition, as in DistDL and the BigConv paper).
//!
//! A network ([`super::graph::Network`]) is written once. Before a layer that needs context it asks
//! its [`Partition`] for the input region its output block needs (derived here from the *output* side:
//! the receptive field of the block, so asymmetric, zero and negative halos come out of the same
//! formula), and runs the layer on what it gets, padded only where the region leaves the image.
//! [`Whole`] hands the input over unchanged; `dist::spatial` exchanges halos between ranks. The layer
//! maths never knows about ranks.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::float::Float;
use crate::nn::kernels::conv::{ConvTranspose, Features, Pads};

/// A box of voxels `lo .. hi` per axis `[D, H, W]` in the coordinates of a whole (global) feature
/// map; it may reach outside the map (into the padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    pub lo: [isize; 3],
    pub hi: [isize; 3],
}

impl Region {
    /// The whole map of size `dims`.
    pub fn whole(dims: [usize; 3]) -> Self {
        Region {
            lo: [0; 3],
            hi: dims.map(|d| d as isize),
        }
    }

    /// Extent per axis (0 when empty).
    pub fn dims(&self) -> [usize; 3] {
        std::array::from_fn(|a| (self.hi[a] - self.lo[a]).max(0) as usize)
    }

    pub fn is_empty(&self) -> bool {
        (0..3).any(|a| self.hi[a] <= self.lo[a])
    }

    pub fn volume(&self) -> usize {
        self.dims().iter().product()
    }

    pub fn intersect(&self, other: &Region) -> Region {
        Region {
            lo: std::array::from_fn(|a| self.lo[a].max(other.lo[a])),
            hi: std::array::from_fn(|a| self.hi[a].min(other.hi[a])),
        }
    }

    /// Whether every voxel of `other` lies in `self`.
    pub fn contains(&self, other: &Region) -> bool {
        self.intersect(other) == *other
    }

    /// The part inside a map of size `dims`.
    pub fn clip(&self, dims: [usize; 3]) -> Region {
        self.intersect(&Region::whole(dims))
    }

    /// How far the region reaches beyond a map of size `dims` on each side: the zero padding a
    /// layer applies to the clipped data (the whole extent when the region lies entirely outside).
    pub fn overhang(&self, dims: [usize; 3]) -> Pads {
        let inside = self.clip(dims).dims();
        std::array::from_fn(|a| {
            let len = (self.hi[a] - self.lo[a]).max(0);
            let lo = (-self.lo[a]).clamp(0, len) as usize;
            [lo, len as usize - lo - inside[a]]
        })
    }
}

/// The input region a convolution (kernel `k`, stride `s`, padding `p`, dilation `d` per axis)
/// reads to produce the output block `out`: `[o₀·s − p, (o₁ − 1)·s − p + d·(k − 1) + 1)`.
pub fn conv_input_region(
    out: &Region,
    kernel: [usize; 3],
    stride: [usize; 3],
    pad: [usize; 3],
    dilation: [usize; 3],
) -> Region {
    Region {
        lo: std::array::from_fn(|a| out.lo[a] * stride[a] as isize - pad[a] as isize),
        hi: std::array::from_fn(|a| {
            (out.hi[a] - 1) * stride[a] as isize - pad[a] as isize
                + (dilation[a] * (kernel[a] - 1)) as isize
                + 1
        }),
    }
}

/// The input region of `n_in` voxels per axis that a transposed convolution reads for the output
/// block `out`, and the window offset (`crop_lo` of [`ConvTranspose::forward_window`]) of that
/// block relative to the region. Input `i` reaches outputs `i·s − p + k·d`, `k < K`; the region
/// starts low enough that `crop_lo ≥ 0` and never leaves the input (there is no padding to read).
pub fn transposed_input_region<T: Float>(
    t: &ConvTranspose<T>,
    out: &Region,
    n_in: [usize; 3],
) -> (Region, [usize; 3]) {
    let mut lo = [0isize; 3];
    let mut hi = [0isize; 3];
    let mut crop = [0usize; 3];
    for a in 0..3 {
        let (s, p) = (t.stride[a] as isize, t.pad[a] as isize);
        let reach = (t.dilation[a] * (t.kernel[a] - 1)) as isize;
        let from = out.lo[a] + p - reach;
        let first = from.div_euclid(s) + isize::from(from.rem_euclid(s) != 0);
        let l = first.min((out.lo[a] + p).div_euclid(s)).max(0);
        let h = ((out.hi[a] - 1 + p).div_euclid(s) + 1).clamp(l, n_in[a] as isize);
        lo[a] = l;
        hi[a] = h;
        crop[a] = (p + out.lo[a] - l * s) as usize;
    }
    (Region { lo, hi }, crop)
}

/// `lo..hi` of part `i` of `n` voxels split into `parts` nearly equal parts (sizes differ by at
/// most one, larger parts last).
pub fn balanced_part(n: usize, parts: usize, i: usize) -> (usize, usize) {
    (i * n / parts, (i + 1) * n / parts)
}

/// A grid of ranks over the spatial axes `[D, H, W]`; rank `r` sits at row-major coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    pub shape: [usize; 3],
}

impl Grid {
    pub fn single() -> Self {
        Grid { shape: [1; 3] }
    }

    pub fn ranks(&self) -> usize {
        self.shape.iter().product()
    }

    /// The grid of `world` ranks over a map of `dims` (axes of size 1 are never split) that
    /// exchanges the fewest voxels per layer: the split minimising the sum over split axes of the
    /// cut area `(parts − 1) · volume / extent`.
    pub fn auto(world: usize, dims: [usize; 3]) -> Result<Self> {
        let mut best: Option<(f64, [usize; 3])> = None;
        for pd in divisors(world) {
            for ph in divisors(world / pd) {
                let pw = world / pd / ph;
                let shape = [pd, ph, pw];
                if (0..3).any(|a| shape[a] > dims[a]) {
                    continue;
                }
                let vol: f64 = dims.iter().map(|&d| d as f64).product();
                let cut: f64 = (0..3)
                    .map(|a| (shape[a] - 1) as f64 * vol / dims[a] as f64)
                    .sum();
                if best.is_none_or(|(c, _)| cut < c) {
                    best = Some((cut, shape));
                }
            }
        }
        best.map(|(_, shape)| Grid { shape }).ok_or_else(|| {
            Error::config(
                "grid",
                format!("{world} ranks cannot split a map of {dims:?} voxels (one voxel per rank at least)"),
            )
        })
    }

    /// A given grid, checked against the world size.
    pub fn given(shape: [usize; 3], world: usize) -> Result<Self> {
        let g = Grid { shape };
        if shape.contains(&0) || g.ranks() != world {
            return Err(Error::config(
                "grid",
                format!("a grid of {shape:?} ranks does not match the world size {world}"),
            ));
        }
        Ok(g)
    }

    pub fn coords(&self, rank: usize) -> [usize; 3] {
        let [_, h, w] = self.shape;
        [rank / (h * w), rank / w % h, rank % w]
    }

    /// The grid `counts` (ranks per spatial axis, one entry for each of the data's `axes` spatial
    /// axes) for `world` ranks, or [`Grid::auto`] for `None`; `field` names the setting in errors.
    pub fn for_axes(
        counts: Option<&[usize]>,
        axes: usize,
        world: usize,
        dims: [usize; 3],
        field: &str,
    ) -> Result<Self> {
        let Some(g) = counts else {
            return Grid::auto(world, dims);
        };
        if g.len() != axes {
            return Err(Error::config(
                field,
                format!(
                    "has {} entries but the data has {axes} spatial axes",
                    g.len()
                ),
            ));
        }
        let mut shape = [1; 3];
        shape[3 - axes..].copy_from_slice(g);
        let grid = Grid::given(shape, world)?;
        grid.check_fits(dims, "the image")?;
        Ok(grid)
    }

    /// Rank `rank`'s block of a map of `dims`.
    pub fn block(&self, dims: [usize; 3], rank: usize) -> Region {
        let c = self.coords(rank);
        let mut r = Region::whole(dims);
        for a in 0..3 {
            let (lo, hi) = balanced_part(dims[a], self.shape[a], c[a]);
            r.lo[a] = lo as isize;
            r.hi[a] = hi as isize;
        }
        r
    }

    /// Fails unless every rank gets at least one voxel of a map of `dims` (named `what`).
    pub fn check_fits(&self, dims: [usize; 3], what: &str) -> Result<()> {
        if (0..3).any(|a| dims[a] < self.shape[a]) {
            return Err(Error::config(
                "grid",
                format!(
                    "{what} is {dims:?} voxels, too small for a grid of {:?} ranks (each rank needs one voxel per axis at least)",
                    self.shape
                ),
            ));
        }
        Ok(())
    }
}

fn divisors(n: usize) -> impl Iterator<Item = usize> {
    (1..=n).filter(move |d: &usize| n.is_multiple_of(*d))
}

/// Where feature maps live and how a layer gets the input region it needs. Every rank makes the
/// same calls in the same order (the calls exchange data).
pub trait Partition<T: Float>: Sync {
    fn grid(&self) -> Grid;
    fn rank(&self) -> usize;

    /// This rank's block of a map of `dims`.
    fn block(&self, dims: [usize; 3]) -> Region {
        self.grid().block(dims, self.rank())
    }

    /// The data of `needs[self.rank()]` clipped to the map, given every rank's block `x` of a map
    /// of `dims` and every rank's need (indexed by rank).
    fn gather<'a>(
        &self,
        x: &'a Features<T>,
        dims: [usize; 3],
        needs: &[Region],
    ) -> Result<Cow<'a, Features<T>>>;

    /// [`Partition::gather`] into `x` itself: this rank's block `x` grows in place into its clipped
    /// need, halos received from the neighbours, so a layer holds no second copy of its input.
    /// `Ok(Some(w))`: done, and [`Widened::narrow`] gives the block back afterwards where `x` is
    /// still needed; `Ok(None)`: `x` is unchanged because its need does not contain the block
    /// (a strided layer's negative halo), and [`Partition::gather`] is the way.
    fn widen(
        &self,
        _x: &mut Features<T>,
        _dims: [usize; 3],
        _needs: &[Region],
    ) -> Result<Option<Widened>> {
        Ok(None)
    }

    /// The adjoint of [`Partition::gather`]: `g` holds a gradient over this rank's clipped need; the
    /// result is the gradient over this rank's block, with every rank's contributions added.
    fn gather_adjoint(
        &self,
        g: Features<T>,
        dims: [usize; 3],
        needs: &[Region],
    ) -> Result<Features<T>>;

    /// Sums parameter gradients over ranks (in place; every rank ends with the same values).
    fn sum_over_ranks(&self, grads: &mut [T]) -> Result<()>;
}

/// A denoiser that runs on this rank's block of an image decomposed over a [`Partition`].
pub trait BlockDenoiser: Send + Sync {
    /// This rank's block of the denoised batch, from this rank's block `x` of a batch with
    /// `spatial_axes` (1 to 3) axes of global size `dims`.
    fn denoise_block(
        &self,
        x: &Features<f32>,
        dims: [usize; 3],
        spatial_axes: usize,
        sigma: f32,
        partition: &dyn Partition<f32>,
    ) -> Result<Features<f32>>;

    fn out_channels(&self) -> usize;

    /// What [`Network::halo_volumes`](crate::nn::layers::graph::Network::halo_volumes) predicts for each
    /// exchange of one `denoise_block` call on `grid`, per batch item, when the call is one pass of
    /// the network over `dims`; `None` when it also gathers or crops around the network (sizes a
    /// network pads or splits first).
    fn halo_volumes(
        &self,
        dims: [usize; 3],
        spatial_axes: usize,
        grid: Grid,
    ) -> Result<Option<Vec<(String, usize)>>>;
}

/// The whole map on one process: gathers are views, adjoints the identity.
#[derive(Debug, Default, Clone, Copy)]
pub struct Whole;

impl<T: Float> Partition<T> for Whole {
    fn grid(&self) -> Grid {
        Grid::single()
    }
    fn rank(&self) -> usize {
        0
    }
    fn gather<'a>(
        &self,
        x: &'a Features<T>,
        dims: [usize; 3],
        needs: &[Region],
    ) -> Result<Cow<'a, Features<T>>> {
        let want = needs[0].clip(dims);
        if want == Region::whole(dims) {
            Ok(Cow::Borrowed(x))
        } else {
            Ok(Cow::Owned(copy_region(x, &Region::whole(dims), &want)))
        }
    }
    fn widen(
        &self,
        _x: &mut Features<T>,
        dims: [usize; 3],
        needs: &[Region],
    ) -> Result<Option<Widened>> {
        // The layer pads the whole map itself; a need short of it takes a copy (`gather`).
        let whole = Region::whole(dims);
        Ok((needs[0].clip(dims) == whole).then_some(Widened {
            own: whole,
            want: whole,
        }))
    }
    fn gather_adjoint(
        &self,
        g: Features<T>,
        dims: [usize; 3],
        needs: &[Region],
    ) -> Result<Features<T>> {
        let have = needs[0].clip(dims);
        if have == Region::whole(dims) {
            return Ok(g);
        }
        let mut out = Features::zeros(g.batch, g.channels, dims);
        add_region(&mut out, &Region::whole(dims), &g, &have);
        Ok(out)
    }
    fn sum_over_ranks(&self, _grads: &mut [T]) -> Result<()> {
        Ok(())
    }
}

/// A block widened in place by [`Partition::widen`]: it held `own`, it now holds `want ⊇ own`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Widened {
    pub own: Region,
    pub want: Region,
}

impl Widened {
    /// Gives `x` its block back, in place (the halo cells are dropped; the memory shrinks).
    pub fn narrow<T: Float>(&self, x: &mut Features<T>) {
        if self.own == self.want {
            return;
        }
        let planes = x.batch * x.channels;
        // Rows move towards the front (a row's new offset is at most its old one), in order.
        for (o, i, n) in rows(&self.want, &self.own, planes) {
            x.data.copy_within(o..o + n, i);
        }
        x.data.truncate(planes * self.own.volume());
        x.data.shrink_to_fit();
        x.dims = self.own.dims();
    }
}

/// Grows `x`, which holds `own`, in place to hold `want ⊇ own` (global coordinates): its cells
/// move to their places in the larger box and every cell of `want` outside `own` is zero. The
/// buffer grows by exactly the halo (a large one is remapped, not copied, by the allocator).
pub fn widen_in_place<T: Float>(x: &mut Features<T>, own: &Region, want: &Region) {
    debug_assert!(want.contains(own), "{want:?} does not contain {own:?}");
    if own == want {
        return;
    }
    let planes = x.batch * x.channels;
    let len = planes * want.volume();
    x.data.reserve_exact(len - x.data.len());
    x.data.resize(len, T::ZERO);
    let moves: Vec<(usize, usize, usize)> = rows(want, own, planes).collect();
    // Rows move towards the back (a row's new offset is at least its old one), last first, so
    // no row is overwritten before it has moved.
    for &(o, i, n) in moves.iter().rev() {
        x.data.copy_within(i..i + n, o);
    }
    let mut end = 0;
    for &(o, _, n) in &moves {
        x.data[end..o].fill(T::ZERO);
        end = o + n;
    }
    x.data[end..].fill(T::ZERO);
    x.dims = want.dims();
}

/// The part `want` of `x`, which holds the region `x_at` (both in global coordinates).
pub fn copy_region<T: Float>(x: &Features<T>, x_at: &Region, want: &Region) -> Features<T> {
    copy_region_of(&x.data, x.batch, x.channels, x_at, want)
}

/// [`copy_region`] of `batch × channels` planes held in a plain slice (e.g. a tensor's data, which
/// then need not be copied into [`Features`] first).
pub fn copy_region_of<T: Float>(
    data: &[T],
    batch: usize,
    channels: usize,
    x_at: &Region,
    want: &Region,
) -> Features<T> {
    let mut out = Features::zeros(batch, channels, want.dims());
    for (o, i, n) in rows(x_at, want, batch * channels) {
        out.data[i..i + n].copy_from_slice(&data[o..o + n]);
    }
    out
}

/// `dst[region] = src[region]`, where `dst` holds `dst_at` and `src` holds `src_at`, both
/// containing `region` (global coordinates): a block's own part copied straight into its halo-padded
/// copy, with no temporary as large as the block.
pub fn copy_between<T: Float>(
    dst: &mut Features<T>,
    dst_at: &Region,
    src: &Features<T>,
    src_at: &Region,
    region: &Region,
) {
    let planes = src.batch * src.channels;
    for ((o, _, n), (i, _, _)) in rows(dst_at, region, planes).zip(rows(src_at, region, planes)) {
        dst.data[o..o + n].copy_from_slice(&src.data[i..i + n]);
    }
}

/// `dst[src_at] += src`, where `dst` holds `dst_at ⊇ src_at` (global coordinates).
pub fn add_region<T: Float>(
    dst: &mut Features<T>,
    dst_at: &Region,
    src: &Features<T>,
    src_at: &Region,
) {
    for (o, i, n) in rows(dst_at, src_at, src.batch * src.channels) {
        dst.data[o..o + n]
            .iter_mut()
            .zip(&src.data[i..i + n])
            .for_each(|(a, b)| *a += *b);
    }
}

/// The rows of `inner ⊆ outer` in `planes` planes: `(offset in an array holding outer, offset in
/// an array holding inner, row length)`.
pub fn rows(
    outer: &Region,
    inner: &Region,
    planes: usize,
) -> impl Iterator<Item = (usize, usize, usize)> {
    let od = outer.dims();
    let id = inner.dims();
    let (ov, iv) = (outer.volume(), inner.volume());
    let off: [usize; 3] = std::array::from_fn(|a| (inner.lo[a] - outer.lo[a]) as usize);
    (0..planes).flat_map(move |p| {
        (0..id[0] * id[1]).map(move |r| {
            let (z, y) = (r / id[1], r % id[1]);
            let o = p * ov + ((off[0] + z) * od[1] + off[1] + y) * od[2] + off[2];
            (o, p * iv + r * id[2], id[2])
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The input voxels a conv output block reads, by visiting every tap: the definition.
    fn conv_receptive_field(
        o: (isize, isize),
        k: usize,
        s: usize,
        p: usize,
        d: usize,
    ) -> (isize, isize) {
        let mut lo = isize::MAX;
        let mut hi = isize::MIN;
        for out in o.0..o.1 {
            for tap in 0..k {
                let i = out * s as isize + (tap * d) as isize - p as isize;
                lo = lo.min(i);
                hi = hi.max(i + 1);
            }
        }
        (lo, hi)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Halos from the output side equal the receptive field, and the halo widths the blocks
        /// exchange (need − own, either sign) follow, for random layers and splits.
        #[test]
        fn conv_halos_equal_the_receptive_field(
            k in 1usize..8, s in 1usize..4, p in 0usize..4, d in 1usize..4,
            extra in 0usize..200, parts in 1usize..6, pick in 0usize..1000,
        ) {
            let reach = d * (k - 1) + 1;
            let n_in = reach.saturating_sub(2 * p).max(1) + extra;
            let n_out = (n_in + 2 * p - reach) / s + 1;
            let parts = parts.min(n_out);
            let part = pick % parts;
            let (o0, o1) = balanced_part(n_out, parts, part);
            let out = Region { lo: [0, 0, o0 as isize], hi: [1, 1, o1 as isize] };
            let need = conv_input_region(&out, [1, 1, k], [1, 1, s], [0, 0, p], [1, 1, d]);
            let want = conv_receptive_field((o0 as isize, o1 as isize), k, s, p, d);
            prop_assert_eq!((need.lo[2], need.hi[2]), want);
            // Clipped to the image, the padding is what the layer pads on one device.
            let pads = need.overhang([1, 1, n_in]);
            let clip = need.clip([1, 1, n_in]);
            let local_out = (clip.dims()[2] + pads[2][0] + pads[2][1] - reach) / s + 1;
            prop_assert_eq!(local_out, o1 - o0);
        }

        /// The transposed-convolution region holds every input that reaches the output block and
        /// starts at a non-negative window offset.
        #[test]
        fn transposed_regions_cover_every_contributing_input(
            k in 1usize..6, s in 1usize..4, p in 0usize..3, d in 1usize..3,
            n_in in 1usize..60, parts in 1usize..5, pick in 0usize..1000,
        ) {
            let t: ConvTranspose<f64> = ConvTranspose::with_geometry(
                1, 1, [1, 1, k], [1, 1, s], [0, 0, p], [1, 1, d], [0; 3], vec![0.0; k], None);
            let Some(od) = t.out_dims([1, 1, n_in]) else { return Ok(()); };
            let parts = parts.min(od[2]);
            let part = pick % parts;
            let (o0, o1) = balanced_part(od[2], parts, part);
            let out = Region { lo: [0, 0, o0 as isize], hi: [1, 1, o1 as isize] };
            let (need, crop) = transposed_input_region(&t, &out, [1, 1, n_in]);
            for i in 0..n_in as isize {
                let reaches = (0..k as isize).any(|tap| {
                    let o = i * s as isize - p as isize + tap * d as isize;
                    (o0 as isize..o1 as isize).contains(&o)
                });
                if reaches {
                    prop_assert!(need.lo[2] <= i && i < need.hi[2], "input {} outside {:?}", i, need);
                }
            }
            prop_assert_eq!(crop[2] as isize, p as isize + o0 as isize - need.lo[2] * s as isize);
        }
    }

    /// A region copied straight between two arrays of different extents lands where copying it
    /// out and adding it into zeros puts it, and nothing else is written.
    #[test]
    fn copy_between_moves_exactly_the_region() {
        let src_at = Region {
            lo: [0, 2, -1],
            hi: [3, 9, 7],
        };
        let dst_at = Region {
            lo: [1, 0, 0],
            hi: [4, 8, 9],
        };
        let region = src_at.intersect(&dst_at);
        let mut src: Features<f64> = Features::zeros(2, 3, src_at.dims());
        src.data
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as f64 + 0.5);
        let mut direct = Features::zeros(2, 3, dst_at.dims());
        direct.data.iter_mut().for_each(|v| *v = -1.0);
        let mut via_copy = direct.clone();
        copy_between(&mut direct, &dst_at, &src, &src_at, &region);
        let mut zeros = copy_region(&via_copy, &dst_at, &region);
        zeros.data.iter_mut().for_each(|v| *v = 0.0);
        add_region(
            &mut zeros,
            &region,
            &copy_region(&src, &src_at, &region),
            &region,
        );
        for (o, i, n) in rows(&dst_at, &region, 6) {
            via_copy.data[o..o + n].copy_from_slice(&zeros.data[i..i + n]);
        }
        assert_eq!(direct, via_copy);
        let untouched = direct.data.iter().filter(|&&v| v == -1.0).count();
        assert_eq!(untouched, 6 * (dst_at.volume() - region.volume()));
    }

    proptest! {
        /// Widening in place gives what a copy into a zeroed box gives, and narrowing gives the
        /// block back as it was, for any block inside any box (empty margins on some sides).
        #[test]
        fn widening_in_place_equals_a_padded_copy_and_narrowing_undoes_it(
            lo in proptest::array::uniform3(0isize..3),
            ext in proptest::array::uniform3(1isize..5),
            margin in proptest::array::uniform6(0isize..3),
            planes in 1usize..4,
        ) {
            let own = Region {
                lo,
                hi: std::array::from_fn(|a| lo[a] + ext[a]),
            };
            let want = Region {
                lo: std::array::from_fn(|a| own.lo[a] - margin[a]),
                hi: std::array::from_fn(|a| own.hi[a] + margin[a + 3]),
            };
            let mut x: Features<f64> = Features::zeros(1, planes, own.dims());
            x.data.iter_mut().enumerate().for_each(|(i, v)| *v = i as f64 + 1.0);
            let block = x.clone();
            let mut padded = Features::zeros(1, planes, want.dims());
            copy_between(&mut padded, &want, &x, &own, &own);
            widen_in_place(&mut x, &own, &want);
            prop_assert_eq!(&x, &padded);
            Widened { own, want }.narrow(&mut x);
            prop_assert_eq!(&x, &block);
            prop_assert_eq!(x.data.capacity(), block.data.len());
        }
    }

    #[test]
    fn automatic_grids_cut_across_the_long_axis_and_cover_the_map() {
        assert_eq!(Grid::auto(2, [1, 100, 300]).unwrap().shape, [1, 1, 2]);
        assert_eq!(Grid::auto(4, [1, 256, 256]).unwrap().shape, [1, 2, 2]);
        assert_eq!(Grid::auto(3, [1, 10, 1]).unwrap().shape, [1, 3, 1]);
        assert!(Grid::auto(4, [1, 1, 3]).is_err());
        assert!(Grid::given([1, 2, 2], 3).is_err());
        let g = Grid::auto(6, [5, 37, 41]).unwrap();
        let dims = [5, 37, 41];
        let total: usize = (0..6).map(|r| g.block(dims, r).volume()).sum();
        assert_eq!(total, 5 * 37 * 41);
        for r in 0..6 {
            for q in 0..r {
                assert!(g.block(dims, r).intersect(&g.block(dims, q)).is_empty());
            }
        }
    }
}
