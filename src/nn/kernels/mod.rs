//! The native engine's numeric kernels, generic over the element type ([`crate::float::Float`]):
//! convolution and its transposed and backward passes in im2col strips ([`conv`]), the AVX-512
//! strip products it hands its matrix products to ([`patch_gemm`] for the forward and the input
//! gradient, `patch_dot` for the weight gradient; [`simd`] says whether they run), and Winograd's
//! F(4×4, 3×3) for the 2-D 3×3 layers ([`winograd`]). Nothing here knows about layers, graphs or
//! weight files: the layers (`super::layers`) call in, nothing calls out.

pub mod conv;
pub(crate) mod patch_dot;
pub mod patch_gemm;
pub mod simd;
pub mod winograd;
