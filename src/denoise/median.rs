//! Median filter, deepinv's `MedianFilter`: each pixel becomes the median of the `k×k` (images) or
//! `k×k×k` (volumes) window centred on it.
//!
//! Boundary: whole-sample reflection (`d c b | a b c d | c b a`), as deepinv's `F.pad(mode="reflect")`
//! with "same" padding; unlike torch, windows larger than the image are allowed (the reflection
//! repeats). The call's σ is ignored: the filter has no strength parameter besides its size. deepinv
//! filters 2-D only (default `kernel_size=9`); the 3-D window is tessera's extension.

use rayon::prelude::*;

use super::{Denoiser, map_planes, reflect_index};
use crate::error::Result;
use crate::tensor::Tensor;

/// Median filter with an odd window side `kernel_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MedianFilter {
    pub kernel_size: usize,
}

impl Denoiser for MedianFilter {
    fn name(&self) -> String {
        format!("median({}px)", self.kernel_size)
    }

    fn denoise(&self, x: &Tensor, _sigma: f32) -> Result<Tensor> {
        let k = self.kernel_size;
        map_planes("median", x, |input, out, dims| {
            let [d, h, w] = match *dims {
                [h, w] => [1, h, w],
                [d, h, w] => [d, h, w],
                _ => unreachable!("map_planes only passes 2-D or 3-D planes"),
            };
            let kd = if dims.len() == 3 { k } else { 1 };
            let r = (k / 2) as isize;
            let rd = (kd / 2) as isize;
            // Reflected column index for every window position, computed once per plane.
            let cols: Vec<usize> = (0..w + k - 1)
                .map(|i| reflect_index(i as isize - r, w))
                .collect();
            let window = kd * k * k;
            let mid = window / 2;
            out.par_chunks_mut(w)
                .enumerate()
                .with_min_len((4096 / w).max(1))
                .for_each_init(
                    || vec![0.0f32; window],
                    |vals, (q, row_out)| {
                        let (z, y) = (q / h, q % h);
                        for (xi, o) in row_out.iter_mut().enumerate() {
                            let mut n = 0;
                            for dz in -rd..=rd {
                                let zz = reflect_index(z as isize + dz, d);
                                for dy in -r..=r {
                                    let yy = reflect_index(y as isize + dy, h);
                                    let row = &input[(zz * h + yy) * w..][..w];
                                    for &c in &cols[xi..xi + k] {
                                        vals[n] = row[c];
                                        n += 1;
                                    }
                                }
                            }
                            let (_, m, _) = vals.select_nth_unstable_by(mid, f32::total_cmp);
                            *o = *m;
                        }
                    },
                );
        })
    }
}
