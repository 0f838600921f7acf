//! STUB
use crate::error::Result;
use crate::tensor::Tensor;
pub fn psnr(x: &Tensor, r: &Tensor, range: f32) -> Result<f64> {
    let mse = x.sub(r).norm_sq() / x.numel() as f64;
    Ok(10.0 * ((range as f64).powi(2) / mse).log10())
}
pub fn ssim(_x: &Tensor, _r: &Tensor, _range: f32) -> Result<f64> {
    Ok(0.0)
}
