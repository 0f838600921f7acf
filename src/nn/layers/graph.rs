//! A convolutional network as a small graph of layers — convolutions (with fused bias, residual
//! accumulation and ReLU), transposed convolutions, pooling and additions — with its forward pass
//! (inference frees each activation after its last use; training keeps them) and its backward pass
//! (gradients for the input and every weight and bias).
//!
//! DnCNN, DRUNet and the decomposition test models are built as graphs, so one definition runs on
//! one process ([`Whole`](super::partition::Whole)) and on a grid of ranks (`dist::spatial`): before a
//! layer that needs context the graph asks its [`Partition`] for the input region the layer's output
//! block needs, and after the layer's backward pass it hands the region's gradient back through the
//! partition's adjoint. Parameters are named as PyTorch names them (`{node}.weight`, `{node}.bias`), so
//! a trained network saves to a state dict deepinv loads.

use std::borrow::Cow;

use super::partition::{Grid, Partition, Region, conv_input_region, transposed_input_region};
use super::pool::Pool;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::nn::kernels::conv::{Conv, ConvTranspose, Features};
use crate::nn::weights::state_dict::StateDict;
use crate::tensor::Tensor;

/// One layer and the nodes it reads.
#[derive(Clone, Debug)]
pub enum Op<T: Float> {
    /// The network's input (node 0 only).
    Input {
        channels: usize,
    },
    /// `relu?(conv(x) + bias + acc)`.
    Conv {
        layer: Conv<T>,
        x: usize,
        acc: Option<usize>,
    },
    ConvTranspose {
        layer: ConvTranspose<T>,
        x: usize,
    },
    /// Max or average pooling (no parameters).
    Pool {
        layer: Pool,
        x: usize,
    },
    /// `a + b` (skip connections).
    Add {
        a: usize,
        b: usize,
    },
}

#[derive(Clone, Debug)]
pub struct Node<T: Float> {
    /// The parameter prefix (`m_head`, `conv_list.3`, …); empty for nodes without parameters.
    pub name: String,
    pub op: Op<T>,
}

/// A network: nodes in execution order, node 0 the input, the last node the output.
#[derive(Clone, Debug)]
pub struct Network<T: Float = f32> {
    nodes: Vec<Node<T>>,
    /// Spatial axes of the data (1, 2 or 3): decides the shapes of saved weights.
    rank: usize,
}

/// The activations of a training forward pass, for [`Network::backward`].
#[derive(Clone, Debug, PartialEq)]
pub struct Tape<T: Float> {
    /// Every node's output (this rank's block).
    values: Vec<Features<T>>,
    /// Every node's global spatial size.
    dims: Vec<[usize; 3]>,
}

impl<T: Float> Tape<T> {
    /// The network's output (this rank's block).
    pub fn output(&self) -> &Features<T> {
        self.values.last().expect("a network has nodes")
    }

    /// Every node's global spatial size (the output's last).
    pub fn dims(&self) -> &[[usize; 3]] {
        &self.dims
    }

    /// `layer` on node `x`'s taped block widened to `needs` (every rank's input region), for a
    /// backward pass: widened in place and narrowed back afterwards, so the tape holds the same
    /// values again; where the need does not contain the block (a strided layer's negative halo)
    /// the partition copies the region instead.
    fn with_halo<R>(
        &mut self,
        x: usize,
        needs: &[Region],
        partition: &dyn Partition<T>,
        layer: impl FnOnce(&Features<T>) -> R,
    ) -> Result<R> {
        let input = &mut self.values[x];
        if let Some(widened) = partition.widen(input, self.dims[x], needs)? {
            let out = layer(input);
            widened.narrow(input);
            return Ok(out);
        }
        let local = partition.gather(input, self.dims[x], needs)?;
        Ok(layer(&local))
    }
}

/// Gradients of every parameter, flat in [`Network::params`] order (one buffer, so a single
/// collective sums them over ranks).
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients<T: Float> {
    pub data: Vec<T>,
}

impl<T: Float> Network<T> {
    /// An empty network on data of `rank` spatial axes with `channels` input channels.
    pub fn new(rank: usize, channels: usize) -> Self {
        assert!((1..=3).contains(&rank), "network rank {rank}");
        Network {
            nodes: vec![Node {
                name: String::new(),
                op: Op::Input { channels },
            }],
            rank,
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn nodes(&self) -> &[Node<T>] {
        &self.nodes
    }

    /// The node the next layer reads by default: the last one added.
    pub fn last(&self) -> usize {
        self.nodes.len() - 1
    }

    fn push(&mut self, name: &str, op: Op<T>) -> usize {
        self.nodes.push(Node {
            name: name.to_string(),
            op,
        });
        self.last()
    }

    pub fn conv(&mut self, name: &str, x: usize, acc: Option<usize>, layer: Conv<T>) -> usize {
        assert_eq!(self.channels(x), layer.c_in, "{name}: input channels");
        if let Some(a) = acc {
            assert_eq!(
                self.channels(a),
                layer.c_out,
                "{name}: accumulator channels"
            );
        }
        self.push(name, Op::Conv { layer, x, acc })
    }

    pub fn conv_transpose(&mut self, name: &str, x: usize, layer: ConvTranspose<T>) -> usize {
        assert_eq!(self.channels(x), layer.c_in, "{name}: input channels");
        self.push(name, Op::ConvTranspose { layer, x })
    }

    pub fn pool(&mut self, x: usize, layer: Pool) -> usize {
        self.push("", Op::Pool { layer, x })
    }

    pub fn add(&mut self, a: usize, b: usize) -> usize {
        assert_eq!(self.channels(a), self.channels(b), "add: channels");
        self.push("", Op::Add { a, b })
    }

    /// Channels of node `i`'s output.
    pub fn channels(&self, i: usize) -> usize {
        match &self.nodes[i].op {
            Op::Input { channels } => *channels,
            Op::Conv { layer, .. } => layer.c_out,
            Op::ConvTranspose { layer, .. } => layer.c_out,
            Op::Add { a, .. } => self.channels(*a),
            Op::Pool { x, .. } => self.channels(*x),
        }
    }

    pub fn in_channels(&self) -> usize {
        self.channels(0)
    }

    pub fn out_channels(&self) -> usize {
        self.channels(self.last())
    }

    /// Every node's global spatial size for an input of `dims`; an error names the layer whose
    /// kernel does not fit, or the addition whose operands differ.
    pub fn shapes(&self, dims: [usize; 3]) -> Result<Vec<[usize; 3]>> {
        let mut out: Vec<[usize; 3]> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let d = match &node.op {
                Op::Input { .. } => Some(dims),
                Op::Conv { layer, x, acc } => {
                    let d = layer.out_dims(out[*x]);
                    if let (Some(d), Some(a)) = (d, acc)
                        && out[*a] != d
                    {
                        return Err(Error::shape(&node.name, &out[*a], &d));
                    }
                    d
                }
                Op::ConvTranspose { layer, x } => layer.out_dims(out[*x]),
                Op::Pool { layer, x } => layer.out_dims(out[*x]),
                Op::Add { a, b } => {
                    if out[*a] != out[*b] {
                        return Err(Error::shape("skip addition", &out[*a], &out[*b]));
                    }
                    Some(out[*a])
                }
            };
            let d = d.ok_or_else(|| {
                Error::config(
                    "image",
                    format!(
                        "an input of {dims:?} voxels is too small for layer `{}` of the network",
                        node.name
                    ),
                )
            })?;
            out.push(d);
        }
        Ok(out)
    }

    /// Shapes, checked against the partition's grid (every rank needs a voxel of every map).
    fn plan(&self, dims: [usize; 3], grid: Grid) -> Result<Vec<[usize; 3]>> {
        let shapes = self.shapes(dims)?;
        if grid.ranks() > 1 {
            for (node, d) in self.nodes.iter().zip(&shapes) {
                let what = if node.name.is_empty() {
                    "a feature map".to_string()
                } else {
                    format!("the output of `{}`", node.name)
                };
                grid.check_fits(*d, &what)?;
            }
        }
        Ok(shapes)
    }

    /// The network on this rank's block `x` of an input of global size `dims`; returns this rank's
    /// block of the output. Each activation is dropped after its last use.
    pub fn forward(
        &self,
        x: Features<T>,
        dims: [usize; 3],
        partition: &dyn Partition<T>,
    ) -> Result<Features<T>> {
        let shapes = self.plan(dims, partition.grid())?;
        self.check_input(&x, dims, partition)?;
        let mut last_use = vec![0; self.nodes.len()];
        for (j, node) in self.nodes.iter().enumerate() {
            for i in inputs(&node.op) {
                last_use[i] = j;
            }
        }
        let out = self.last();
        let mut vals: Vec<Option<Features<T>>> = vec![None; self.nodes.len()];
        vals[0] = Some(x);
        for j in 1..self.nodes.len() {
            let acc = match &self.nodes[j].op {
                Op::Conv { acc: Some(a), .. } if last_use[*a] == j => vals[*a].take(),
                Op::Conv { acc: Some(a), .. } => vals[*a].clone(),
                Op::Add { a, .. } if last_use[*a] == j => vals[*a].take(),
                Op::Add { a, .. } => vals[*a].clone(),
                _ => None,
            };
            let y = self.exec(j, &mut vals, Some(&last_use), acc, &shapes, partition)?;
            for i in inputs(&self.nodes[j].op) {
                if last_use[i] == j {
                    vals[i] = None;
                }
            }
            vals[j] = Some(y);
            self.trace_memory("forward", j);
        }
        Ok(vals[out].take().expect("output computed"))
    }

    /// The forward pass keeping every activation, for [`Network::backward`].
    pub fn forward_train(
        &self,
        x: Features<T>,
        dims: [usize; 3],
        partition: &dyn Partition<T>,
    ) -> Result<Tape<T>> {
        let shapes = self.plan(dims, partition.grid())?;
        self.check_input(&x, dims, partition)?;
        let mut vals: Vec<Option<Features<T>>> = vec![None; self.nodes.len()];
        vals[0] = Some(x);
        for j in 1..self.nodes.len() {
            let acc = match &self.nodes[j].op {
                Op::Conv { acc: Some(a), .. } | Op::Add { a, .. } => vals[*a].clone(),
                _ => None,
            };
            vals[j] = Some(self.exec(j, &mut vals, None, acc, &shapes, partition)?);
            self.trace_memory("forward_train", j);
        }
        Ok(Tape {
            values: vals.into_iter().map(|v| v.expect("computed")).collect(),
            dims: shapes,
        })
    }

    /// Live heap bytes after node `j` and the most held while it ran (where the binary counts
    /// them, `crate::heap`), at trace level: where a pass's memory peak falls.
    fn trace_memory(&self, pass: &str, j: usize) {
        if tracing::enabled!(tracing::Level::TRACE)
            && let (Some(live), Some(peak)) =
                (crate::heap::live_bytes(), crate::heap::take_window_peak())
        {
            let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
            tracing::trace!(
                "{pass} node {j} `{}` {:?}: live {:.1} MiB, peak during it {:.1} MiB",
                self.nodes[j].name,
                std::mem::discriminant(&self.nodes[j].op),
                mib(live),
                mib(peak)
            );
        }
    }

    fn check_input(
        &self,
        x: &Features<T>,
        dims: [usize; 3],
        partition: &dyn Partition<T>,
    ) -> Result<()> {
        let block = partition.block(dims).dims();
        if x.channels != self.in_channels() || x.dims != block {
            return Err(Error::shape(
                "network input block",
                &[self.in_channels(), block[0], block[1], block[2]],
                &[x.channels, x.dims[0], x.dims[1], x.dims[2]],
            ));
        }
        Ok(())
    }

    /// Node `j`'s output block; `acc` is the accumulator (conv) or first operand (add), owned.
    /// A layer's input is widened in place to the region its output needs (halos from the
    /// neighbours) and narrowed back after the layer, so a decomposed layer holds its input once,
    /// as one process does; with `last_use` (inference), an input whose last use is this node is
    /// left wide, for the caller to drop. Where a need does not contain the block (a strided
    /// layer's negative halo) the partition copies the region instead.
    fn exec(
        &self,
        j: usize,
        vals: &mut [Option<Features<T>>],
        last_use: Option<&[usize]>,
        acc: Option<Features<T>>,
        shapes: &[[usize; 3]],
        partition: &dyn Partition<T>,
    ) -> Result<Features<T>> {
        let grid = partition.grid();
        let with_halo =
            |vals: &mut [Option<Features<T>>],
             x: usize,
             needs: &[Region],
             layer: &mut dyn FnMut(&Features<T>) -> Features<T>| {
                let input = vals[x].as_mut().expect("input alive");
                if let Some(widened) = partition.widen(input, shapes[x], needs)? {
                    let y = layer(input);
                    if last_use.is_none_or(|l| l[x] != j) {
                        widened.narrow(input);
                    }
                    return Ok::<_, Error>(y);
                }
                let local = match partition.gather(input, shapes[x], needs)? {
                    Cow::Borrowed(whole) => return Ok(layer(whole)),
                    Cow::Owned(local) => local,
                };
                if last_use.is_some_and(|l| l[x] == j) {
                    vals[x] = None;
                }
                Ok(layer(&local))
            };
        match &self.nodes[j].op {
            Op::Input { .. } => unreachable!("node 0 is the only input"),
            Op::Conv { layer, x, .. } => {
                let needs = conv_needs(layer, shapes[j], grid);
                let pads = needs[partition.rank()].overhang(shapes[*x]);
                let mut acc = acc;
                with_halo(vals, *x, &needs, &mut |local| {
                    layer.forward_padded(local, acc.take(), pads)
                })
            }
            Op::ConvTranspose { layer, x } => {
                let (needs, crop) =
                    transposed_needs(layer, shapes[j], shapes[*x], grid, partition.rank());
                let out = partition.block(shapes[j]).dims();
                with_halo(vals, *x, &needs, &mut |local| {
                    layer.forward_window(local, crop, out)
                })
            }
            Op::Pool { layer, x } => {
                let needs = pool_needs(layer, shapes[j], grid);
                let pads = needs[partition.rank()].overhang(shapes[*x]);
                with_halo(vals, *x, &needs, &mut |local| {
                    layer.forward_padded(local, pads)
                })
            }
            Op::Add { b, .. } => {
                let mut y = acc.expect("add operand");
                y.add_assign(vals[*b].as_ref().expect("input alive"));
                Ok(y)
            }
        }
    }

    /// Gradients of a loss whose gradient with respect to this rank's output block is `dy`: the
    /// parameters' (summed over ranks) are added to `grads`; the input's is returned when
    /// `input_grad`. The tape is borrowed mutably because each layer's taped input is widened in
    /// place with its halo for the layer's backward pass and narrowed back after it (as the
    /// forward pass does), so a decomposed layer never holds a second copy of its input; the tape
    /// holds the same values afterwards.
    pub fn backward(
        &self,
        tape: &mut Tape<T>,
        dy: Features<T>,
        partition: &dyn Partition<T>,
        grads: &mut Gradients<T>,
        input_grad: bool,
    ) -> Result<Option<Features<T>>> {
        let n = self.nodes.len();
        assert_eq!(tape.values.len(), n, "tape of another network");
        assert_eq!(
            grads.data.len(),
            self.param_count(),
            "gradients of another network"
        );
        let grid = partition.grid();
        let me = partition.rank();
        let spans = self.param_spans();
        let mut local_grads = vec![T::ZERO; grads.data.len()];
        let mut g: Vec<Option<Features<T>>> = vec![None; n];
        g[n - 1] = Some(dy);
        let wants = |i: usize| i != 0 || input_grad;
        for j in (1..n).rev() {
            let Some(gy) = g[j].take() else { continue };
            match &self.nodes[j].op {
                Op::Input { .. } => unreachable!(),
                Op::Conv { layer, x, acc } => {
                    let mut dz = gy;
                    if layer.relu {
                        dz.data
                            .iter_mut()
                            .zip(&tape.values[j].data)
                            .for_each(|(g, &y)| {
                                if y <= T::ZERO {
                                    *g = T::ZERO
                                }
                            });
                    }
                    if let Some(a) = acc {
                        accumulate(&mut g[*a], dz.clone());
                    }
                    let needs = conv_needs(layer, tape.dims[j], grid);
                    let pads = needs[me].overhang(tape.dims[*x]);
                    let (w, b) = spans[j].clone().expect("conv has parameters");
                    let (gw, gb) = split_spans(&mut local_grads, w, b);
                    // The widened input is narrowed back before the input gradient exists: the
                    // two are never held at once.
                    let local_dims = tape.with_halo(*x, &needs, partition, |local| {
                        layer.backward_params(local, &dz, pads, gw, gb);
                        local.dims
                    })?;
                    if wants(*x) {
                        let gl = layer.backward_input(&dz, local_dims, pads);
                        drop(dz);
                        let gx = partition.gather_adjoint(gl, tape.dims[*x], &needs)?;
                        accumulate(&mut g[*x], gx);
                    }
                }
                Op::ConvTranspose { layer, x } => {
                    let (needs, crop) =
                        transposed_needs(layer, tape.dims[j], tape.dims[*x], grid, me);
                    let (w, b) = spans[j].clone().expect("transposed conv has parameters");
                    let (gw, gb) = split_spans(&mut local_grads, w, b);
                    let local_dims = tape.with_halo(*x, &needs, partition, |local| {
                        layer.backward_params(local, &gy, crop, gw, gb);
                        local.dims
                    })?;
                    if wants(*x) {
                        let gl = layer.backward_input(&gy, local_dims, crop);
                        drop(gy);
                        let gx = partition.gather_adjoint(gl, tape.dims[*x], &needs)?;
                        accumulate(&mut g[*x], gx);
                    }
                }
                Op::Pool { layer, x } => {
                    if wants(*x) {
                        let needs = pool_needs(layer, tape.dims[j], grid);
                        let pads = needs[me].overhang(tape.dims[*x]);
                        // Max pooling's gradient needs the input's values: computed while widened.
                        let gl = tape.with_halo(*x, &needs, partition, |local| {
                            layer.backward_input(local, &gy, pads)
                        })?;
                        drop(gy);
                        let gx = partition.gather_adjoint(gl, tape.dims[*x], &needs)?;
                        accumulate(&mut g[*x], gx);
                    }
                }
                Op::Add { a, b } => {
                    accumulate(&mut g[*a], gy.clone());
                    accumulate(&mut g[*b], gy);
                }
            }
            self.trace_memory("backward", j);
        }
        partition.sum_over_ranks(&mut local_grads)?;
        grads
            .data
            .iter_mut()
            .zip(&local_grads)
            .for_each(|(a, b)| *a += *b);
        Ok(if input_grad { g[0].take() } else { None })
    }

    /// The halo each layer's exchange moves on `grid` for an input of `dims`: for every layer that
    /// gathers (convolutions and transposed convolutions, in execution order), its name and the
    /// values all ranks together receive from other ranks per batch item (channels × voxels of each
    /// rank's clipped need outside its own block).
    pub fn halo_volumes(&self, dims: [usize; 3], grid: Grid) -> Result<Vec<(String, usize)>> {
        let shapes = self.shapes(dims)?;
        let mut out = Vec::new();
        for (j, node) in self.nodes.iter().enumerate() {
            let Some((x, needs)) = self.input_needs(j, &shapes, grid) else {
                continue;
            };
            let voxels: usize = (0..grid.ranks())
                .map(|r| halo_voxels(&needs[r], &grid.block(shapes[x], r), shapes[x]))
                .sum();
            out.push((node.name.clone(), voxels * self.channels(x)));
        }
        Ok(out)
    }

    /// The most halo values per batch item that rank `rank` of `grid` holds at once for any one
    /// layer, for an input of `dims`: channels × the voxels of the layer's clipped input need
    /// outside the rank's block (what widening adds); with `backward`, twice that for a pooling
    /// layer, whose backward pass holds the widened input and its widened gradient together (a
    /// convolution's input is narrowed back before its input gradient exists). The "+ halos" of
    /// issue 11's memory goal.
    pub fn largest_halo(
        &self,
        dims: [usize; 3],
        grid: Grid,
        rank: usize,
        backward: bool,
    ) -> Result<usize> {
        let shapes = self.shapes(dims)?;
        Ok((0..self.nodes.len())
            .filter_map(|j| {
                let (x, needs) = self.input_needs(j, &shapes, grid)?;
                let halo = halo_voxels(&needs[rank], &grid.block(shapes[x], rank), shapes[x])
                    * self.channels(x);
                let held = match self.nodes[j].op {
                    Op::Pool { .. } if backward => 2,
                    _ => 1,
                };
                Some(held * halo)
            })
            .max()
            .unwrap_or(0))
    }

    /// For a layer that reads its input with context (convolutions, transposed convolutions,
    /// pooling): its input node and every rank's input region.
    fn input_needs(
        &self,
        j: usize,
        shapes: &[[usize; 3]],
        grid: Grid,
    ) -> Option<(usize, Vec<Region>)> {
        Some(match &self.nodes[j].op {
            Op::Conv { layer, x, .. } => (*x, conv_needs(layer, shapes[j], grid)),
            Op::ConvTranspose { layer, x } => (
                *x,
                transposed_needs(layer, shapes[j], shapes[*x], grid, 0).0,
            ),
            Op::Pool { layer, x } => (*x, pool_needs(layer, shapes[j], grid)),
            _ => return None,
        })
    }

    /// For each node: the flat ranges of its weight and bias in [`Gradients::data`].
    fn param_spans(&self) -> Vec<Option<ParamSpan>> {
        let mut at = 0;
        let mut span = |len: usize| {
            at += len;
            at - len..at
        };
        self.nodes
            .iter()
            .map(|node| {
                let (w, b) = match &node.op {
                    Op::Conv { layer, .. } => (&layer.weight, &layer.bias),
                    Op::ConvTranspose { layer, .. } => (&layer.weight, &layer.bias),
                    _ => return None,
                };
                let ws = span(w.len());
                Some((ws, b.as_ref().map(|b| span(b.len()))))
            })
            .collect()
    }

    /// Every parameter: `(name, PyTorch shape, values)`, in node order, weight before bias.
    pub fn params(&self) -> Vec<(String, Vec<usize>, &[T])> {
        let mut out = Vec::new();
        for node in &self.nodes {
            let (shape, w, b) = match &node.op {
                Op::Conv { layer, .. } => (
                    self.weight_shape(layer.c_out, layer.c_in, layer.kernel),
                    &layer.weight,
                    &layer.bias,
                ),
                Op::ConvTranspose { layer, .. } => (
                    self.weight_shape(layer.c_in, layer.c_out, layer.kernel),
                    &layer.weight,
                    &layer.bias,
                ),
                _ => continue,
            };
            out.push((format!("{}.weight", node.name), shape, w.as_slice()));
            if let Some(b) = b {
                out.push((format!("{}.bias", node.name), vec![b.len()], b.as_slice()));
            }
        }
        out
    }

    /// Every parameter's values, mutable, in [`Network::params`] order.
    pub fn params_mut(&mut self) -> Vec<&mut [T]> {
        let mut out: Vec<&mut [T]> = Vec::new();
        for node in &mut self.nodes {
            let (w, b) = match &mut node.op {
                Op::Conv { layer, .. } => (&mut layer.weight, &mut layer.bias),
                Op::ConvTranspose { layer, .. } => (&mut layer.weight, &mut layer.bias),
                _ => continue,
            };
            out.push(w.as_mut_slice());
            if let Some(b) = b {
                out.push(b.as_mut_slice());
            }
        }
        out
    }

    pub fn param_count(&self) -> usize {
        self.params().iter().map(|(_, _, v)| v.len()).sum()
    }

    /// Zero gradients for this network.
    pub fn zero_grads(&self) -> Gradients<T> {
        Gradients {
            data: vec![T::ZERO; self.param_count()],
        }
    }

    fn weight_shape(&self, a: usize, b: usize, kernel: [usize; 3]) -> Vec<usize> {
        let mut s = vec![a, b];
        s.extend_from_slice(&kernel[3 - self.rank..]);
        s
    }

    /// The parameters as a state dict with PyTorch's names and shapes (f32).
    pub fn state_dict(&self, source: &str) -> Result<StateDict> {
        let mut sd = StateDict::new(source);
        for (name, shape, v) in self.params() {
            let data = v.iter().map(|x| x.to_f32()).collect();
            sd.insert(name, Tensor::from_vec(&shape, data)?);
        }
        Ok(sd)
    }

    /// The same network in another precision.
    pub fn cast<U: Float>(&self) -> Network<U> {
        self.map_layers(
            |c| Conv {
                weight: cast_vec(&c.weight),
                bias: c.bias.as_deref().map(cast_vec),
                c_in: c.c_in,
                c_out: c.c_out,
                kernel: c.kernel,
                stride: c.stride,
                pad: c.pad,
                dilation: c.dilation,
                relu: c.relu,
            },
            |t| ConvTranspose {
                weight: cast_vec(&t.weight),
                bias: t.bias.as_deref().map(cast_vec),
                c_in: t.c_in,
                c_out: t.c_out,
                kernel: t.kernel,
                stride: t.stride,
                pad: t.pad,
                dilation: t.dilation,
                output_padding: t.output_padding,
            },
            self.rank,
        )
    }

    /// The same graph with every layer replaced (inflation to 3-D, precision changes).
    pub fn map_layers<U: Float>(
        &self,
        conv: impl Fn(&Conv<T>) -> Conv<U>,
        transposed: impl Fn(&ConvTranspose<T>) -> ConvTranspose<U>,
        rank: usize,
    ) -> Network<U> {
        Network {
            nodes: self
                .nodes
                .iter()
                .map(|n| Node {
                    name: n.name.clone(),
                    op: match &n.op {
                        Op::Input { channels } => Op::Input {
                            channels: *channels,
                        },
                        Op::Conv { layer, x, acc } => Op::Conv {
                            layer: conv(layer),
                            x: *x,
                            acc: *acc,
                        },
                        Op::ConvTranspose { layer, x } => Op::ConvTranspose {
                            layer: transposed(layer),
                            x: *x,
                        },
                        Op::Pool { layer, x } => Op::Pool {
                            layer: *layer,
                            x: *x,
                        },
                        Op::Add { a, b } => Op::Add { a: *a, b: *b },
                    },
                })
                .collect(),
            rank,
        }
    }
}

/// A layer's weight range and optional bias range in the flat gradients.
type ParamSpan = (std::ops::Range<usize>, Option<std::ops::Range<usize>>);

fn cast_vec<T: Float, U: Float>(v: &[T]) -> Vec<U> {
    v.iter().map(|x| U::from_f64(x.to_f64())).collect()
}

/// The nodes an op reads.
fn inputs<T: Float>(op: &Op<T>) -> Vec<usize> {
    match op {
        Op::Input { .. } => vec![],
        Op::Conv { x, acc, .. } => std::iter::once(*x).chain(*acc).collect(),
        Op::ConvTranspose { x, .. } | Op::Pool { x, .. } => vec![*x],
        Op::Add { a, b } => vec![*a, *b],
    }
}

/// Every rank's input region for a convolution whose output map has `out_dims`.
pub fn conv_needs<T: Float>(layer: &Conv<T>, out_dims: [usize; 3], grid: Grid) -> Vec<Region> {
    (0..grid.ranks())
        .map(|r| {
            conv_input_region(
                &grid.block(out_dims, r),
                layer.kernel,
                layer.stride,
                layer.pad,
                layer.dilation,
            )
        })
        .collect()
}

/// Every rank's input region for a pooling layer whose output map has `out_dims` (a pooling window
/// reads what a convolution of the same kernel, stride and padding reads).
pub fn pool_needs(layer: &Pool, out_dims: [usize; 3], grid: Grid) -> Vec<Region> {
    (0..grid.ranks())
        .map(|r| {
            conv_input_region(
                &grid.block(out_dims, r),
                layer.kernel,
                layer.stride,
                layer.pad,
                [1; 3],
            )
        })
        .collect()
}

/// Every rank's input region for a transposed convolution, and rank `me`'s window offset.
pub fn transposed_needs<T: Float>(
    layer: &ConvTranspose<T>,
    out_dims: [usize; 3],
    in_dims: [usize; 3],
    grid: Grid,
    me: usize,
) -> (Vec<Region>, [usize; 3]) {
    let mut crop = [0; 3];
    let needs = (0..grid.ranks())
        .map(|r| {
            let (need, c) = transposed_input_region(layer, &grid.block(out_dims, r), in_dims);
            if r == me {
                crop = c;
            }
            need
        })
        .collect();
    (needs, crop)
}

/// Voxels of `need`, clipped to a map of `dims`, outside `block`.
fn halo_voxels(need: &Region, block: &Region, dims: [usize; 3]) -> usize {
    let need = need.clip(dims);
    need.volume() - need.intersect(block).volume()
}

fn accumulate<T: Float>(slot: &mut Option<Features<T>>, g: Features<T>) {
    match slot {
        Some(s) => s.add_assign(&g),
        None => *slot = Some(g),
    }
}

/// The weight and (optional) bias sub-slices of `grads`.
fn split_spans<T>(
    grads: &mut [T],
    w: std::ops::Range<usize>,
    b: Option<std::ops::Range<usize>>,
) -> (&mut [T], Option<&mut [T]>) {
    match b {
        Some(b) => {
            debug_assert_eq!(w.end, b.start);
            let (head, tail) = grads[w.start..b.end].split_at_mut(w.len());
            (head, Some(tail))
        }
        None => (&mut grads[w], None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::kernels::conv::testing::{dot, random_features};
    use crate::nn::layers::partition::Whole;
    use crate::nn::models::test_models::TestModel;
    use crate::nn::{DncnnArch, DrunetArch};
    use rand::{RngExt, SeedableRng};

    /// Central differences of `L = ⟨r, net(x)⟩` against the backward pass, in f64, for a sample of
    /// input entries and of every parameter tensor's entries.
    fn check_gradients(net: &Network<f64>, dims: [usize; 3], seed: u64) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let x: Features<f64> = random_features(2, net.in_channels(), dims, &mut rng);
        let shapes = net.shapes(dims).unwrap();
        let r: Features<f64> =
            random_features(2, net.out_channels(), *shapes.last().unwrap(), &mut rng);
        let loss = |net: &Network<f64>, x: &Features<f64>| {
            dot(&net.forward(x.clone(), dims, &Whole).unwrap().data, &r.data)
        };
        let mut tape = net.forward_train(x.clone(), dims, &Whole).unwrap();
        let direct = net.forward(x.clone(), dims, &Whole).unwrap();
        assert_eq!(
            tape.output(),
            &direct,
            "training and inference forward passes differ"
        );
        let mut grads = net.zero_grads();
        let gx = net
            .backward(&mut tape, r.clone(), &Whole, &mut grads, true)
            .unwrap()
            .unwrap();
        let eps = 1e-6;
        let close = |fd: f64, an: f64, what: &str| {
            assert!(
                (fd - an).abs() <= 1e-6 * an.abs().max(1.0),
                "{what}: finite difference {fd} vs backward {an}"
            );
        };
        for _ in 0..20 {
            let i = rng.random_range(0..x.data.len());
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp.data[i] += eps;
            xm.data[i] -= eps;
            let fd = (loss(net, &xp) - loss(net, &xm)) / (2.0 * eps);
            close(fd, gx.data[i], &format!("input[{i}]"));
        }
        let names: Vec<(String, usize)> = net
            .params()
            .iter()
            .map(|(n, _, v)| (n.clone(), v.len()))
            .collect();
        let mut offset = 0;
        for (p, (name, len)) in names.iter().enumerate() {
            for _ in 0..4 {
                let i = rng.random_range(0..*len);
                let mut plus = net.clone();
                plus.params_mut()[p][i] += eps;
                let mut minus = net.clone();
                minus.params_mut()[p][i] -= eps;
                let fd = (loss(&plus, &x) - loss(&minus, &x)) / (2.0 * eps);
                close(fd, grads.data[offset + i], &format!("{name}[{i}]"));
            }
            offset += len;
        }
    }

    #[test]
    fn dncnn_gradients_match_finite_differences() {
        let arch = DncnnArch {
            in_channels: 2,
            out_channels: 2,
            depth: 4,
            nf: 5,
            ..DncnnArch::default()
        };
        let net = crate::nn::Dncnn::random_quiet(arch).unwrap();
        check_gradients(&net.network().cast(), [1, 9, 7], 1);
    }

    #[test]
    fn drunet_gradients_match_finite_differences_in_2d_and_3d() {
        for dim in [2, 3] {
            let arch = DrunetArch {
                in_channels: 1,
                out_channels: 1,
                nc: [2, 3, 4, 5],
                nb: 1,
                dim,
            };
            let net = crate::nn::models::drunet::build_unet(
                &arch,
                &mut crate::nn::weights::source::WeightSource::random(4),
            )
            .unwrap();
            let dims = if dim == 2 { [1, 16, 8] } else { [8, 8, 8] };
            check_gradients(&net.cast(), dims, 2);
        }
    }

    #[test]
    fn test_model_gradients_match_finite_differences() {
        for (m, dims) in [
            (TestModel::Cnn1d, [1, 1, 23]),
            (TestModel::Cnn2d, [1, 11, 9]),
            (TestModel::Cnn3d, [6, 7, 5]),
            (TestModel::Fcn2d, [1, 10, 12]),
        ] {
            let net = m.build(2, 3, 5).unwrap();
            check_gradients(&net.cast(), dims, 3);
        }
    }

    #[test]
    fn shapes_name_the_layer_that_does_not_fit_and_params_round_trip_to_a_state_dict() {
        let net = TestModel::Fcn2d.build(1, 2, 0).unwrap();
        let e = net.shapes([1, 9, 12]).unwrap_err().to_string();
        assert!(e.contains("skip addition"), "{e}");
        let mut valid: Network = Network::new(2, 1);
        valid.conv(
            "valid",
            0,
            None,
            Conv::new(2, 1, 1, 3, 1, 0, vec![0.0; 9], None, false),
        );
        let e = valid.shapes([1, 2, 5]).unwrap_err().to_string();
        assert!(e.contains("`valid`"), "{e}");
        let sd = net.state_dict("test").unwrap();
        assert_eq!(sd.len(), net.params().len());
        assert_eq!(sd.get("up1.weight").unwrap().shape(), &[4, 2, 2, 2]);
        assert_eq!(sd.get("classifier.weight").unwrap().shape(), &[1, 2, 1, 1]);
    }
}
