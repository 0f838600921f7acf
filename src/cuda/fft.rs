//! Batched real FFTs on the GPU through cuFFT (cudarc's binding of `libcufft`, loaded at run time):
//! one plan pair (R2C, C2R) per grid and batch size, on the device's stream.

use cudarc::cufft::{result, sys};
use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::device::backend::{Charge, MemoryMeter};
use crate::error::{Error, Result};

/// A forward (R2C) and an inverse (C2R) cuFFT plan for one grid and batch.
pub struct FftPlans {
    pub(super) forward: sys::cufftHandle,
    pub(super) inverse: sys::cufftHandle,
    /// The work areas cuFFT allocated for the two plans, on the device's meter.
    _work: Charge,
}

// SAFETY: cuFFT handles may be used from any thread; the backend serialises their use on one stream.
unsafe impl Send for FftPlans {}
unsafe impl Sync for FftPlans {}

pub(super) fn error(device: &str, what: &str, e: result::CufftError) -> Error {
    Error::Device {
        device: device.into(),
        reason: format!("cuFFT {what}: {e:?}"),
    }
}

impl FftPlans {
    /// Plans for `batch` transforms of `grid` (C order); axes of length 1 other than the last are
    /// dropped (the same layout, spectra included: the real-to-complex halving is the last axis's),
    /// so a 2-D image is a rank-2 transform, and so is a volume one row high.
    pub fn new(
        device: &str,
        stream: &CudaStream,
        meter: &Arc<MemoryMeter>,
        grid: [usize; 3],
        batch: usize,
    ) -> Result<Self> {
        let mut dims = grid[..2]
            .iter()
            .filter(|&&n| n > 1)
            .chain(&grid[2..])
            .map(|&n| i32::try_from(n))
            .collect::<Result<Vec<i32>, _>>()
            .map_err(|_| Error::Unsupported(format!("an FFT grid of {grid:?} is too large")))?;
        let batch = i32::try_from(batch)
            .map_err(|_| Error::Unsupported(format!("a batch of {batch} FFTs is too large")))?;
        let rank = dims.len() as i32;
        let plan = |kind: sys::cufftType, dims: &mut [i32]| -> Result<sys::cufftHandle> {
            // SAFETY: `dims` holds `rank` sizes; null embeddings mean contiguous arrays.
            let handle = unsafe {
                result::plan_many(
                    rank,
                    dims.as_mut_ptr(),
                    std::ptr::null_mut(),
                    1,
                    0,
                    std::ptr::null_mut(),
                    1,
                    0,
                    kind,
                    batch,
                )
            }
            .map_err(|e| error(device, &format!("planning {grid:?} × {batch}"), e))?;
            // SAFETY: a valid plan and this device's stream.
            unsafe { result::set_stream(handle, stream.cu_stream() as sys::cudaStream_t) }
                .map_err(|e| error(device, "setting the stream", e))?;
            Ok(handle)
        };
        let forward = plan(sys::cufftType::CUFFT_R2C, &mut dims)?;
        let inverse = match plan(sys::cufftType::CUFFT_C2R, &mut dims) {
            Ok(h) => h,
            Err(e) => {
                // SAFETY: created above and not used elsewhere.
                let _ = unsafe { result::destroy(forward) };
                return Err(e);
            }
        };
        // SAFETY: both plans were made above; cuFFT allocated their work areas with them.
        let work =
            unsafe { result::get_size(forward).and_then(|f| Ok(f + result::get_size(inverse)?)) };
        let work = match work {
            Ok(bytes) => bytes,
            Err(e) => {
                // SAFETY: created above and not used elsewhere.
                unsafe {
                    let _ = result::destroy(forward);
                    let _ = result::destroy(inverse);
                }
                return Err(error(device, "reading the plans' work size", e));
            }
        };
        Ok(FftPlans {
            forward,
            inverse,
            _work: meter.charge(work as u64),
        })
    }
}

impl Drop for FftPlans {
    fn drop(&mut self) {
        // SAFETY: plans created by `new`, destroyed once.
        unsafe {
            let _ = result::destroy(self.forward);
            let _ = result::destroy(self.inverse);
        }
    }
}
