//! [`Array`]: a shape and a [`Storage`] that is host memory (a `Tensor`) or a backend's memory (a
//! `DeviceVec`), with the vector operations of the algorithms' loops (`optim::space::Iterate`)
//! dispatching on the storage. The host storage calls `Tensor`'s code (the CPU's bits); the device
//! storage calls `device::ops::vector`, whose element-wise kernels round as `Tensor` does and whose
//! reductions sum in f64 in an order fixed by the length.

use std::sync::Arc;

use super::backend::{Backend, DeviceVec};
use super::ops::vector;
use crate::error::{Error, Result};
use std::borrow::Cow;

use crate::optim::space::{HostView, Iterate, Truth};
use crate::tensor::Tensor;

/// Where an [`Array`]'s values live.
pub enum Storage<B: Backend> {
    Host(Tensor),
    Device {
        values: DeviceVec<B, f32>,
        backend: Arc<B>,
    },
}

/// An image (or any float array) in host or device memory.
pub struct Array<B: Backend> {
    shape: Vec<usize>,
    storage: Storage<B>,
}

impl<B: Backend> Array<B> {
    /// `tensor` in host memory.
    pub fn host(tensor: Tensor) -> Self {
        Array {
            shape: tensor.shape().to_vec(),
            storage: Storage::Host(tensor),
        }
    }

    /// A copy of `tensor` in `backend`'s memory.
    pub fn upload(backend: &Arc<B>, tensor: &Tensor) -> Result<Self> {
        Ok(Array {
            shape: tensor.shape().to_vec(),
            storage: Storage::Device {
                values: DeviceVec::from_host(backend.as_ref(), tensor.data())?,
                backend: backend.clone(),
            },
        })
    }

    /// `values` of shape `shape` in `backend`'s memory.
    pub fn on_device(backend: &Arc<B>, shape: &[usize], values: DeviceVec<B, f32>) -> Result<Self> {
        let numel: usize = shape.iter().product();
        if values.len() != numel {
            return Err(Error::shape("device array", &[numel], &[values.len()]));
        }
        Ok(Array {
            shape: shape.to_vec(),
            storage: Storage::Device {
                values,
                backend: backend.clone(),
            },
        })
    }

    /// Zeros of `shape` in `backend`'s memory.
    pub fn zeros(backend: &Arc<B>, shape: &[usize]) -> Result<Self> {
        let values = DeviceVec::zeros(backend.as_ref(), shape.iter().product())?;
        Self::on_device(backend, shape, values)
    }

    /// The backend holding the values; `None` in host memory.
    pub fn backend(&self) -> Option<Arc<B>> {
        match &self.storage {
            Storage::Device { backend, .. } => Some(backend.clone()),
            Storage::Host(_) => None,
        }
    }

    pub fn storage(&self) -> &Storage<B> {
        &self.storage
    }

    /// The device values, or an error naming `op` when the array is in host memory.
    pub fn device_values(&self, op: &str) -> Result<&DeviceVec<B, f32>> {
        match &self.storage {
            Storage::Device { values, .. } => Ok(values),
            Storage::Host(_) => Err(Error::Internal(format!(
                "{op}: a device operation was given an array in host memory"
            ))),
        }
    }

    /// A copy in host memory.
    pub fn to_tensor(&self) -> Result<Tensor> {
        match &self.storage {
            Storage::Host(t) => Ok(t.clone()),
            Storage::Device { values, backend } => {
                Tensor::from_vec(&self.shape, values.to_host(backend.as_ref())?)
            }
        }
    }

    fn same_shape(&self, op: &str, other: &Self) -> Result<()> {
        if self.shape != other.shape {
            return Err(Error::shape(op, &self.shape, &other.shape));
        }
        Ok(())
    }
}

/// The error of an operation given one host and one device array.
fn mixed(op: &str) -> Error {
    Error::Internal(format!(
        "{op}: one array in host memory and one on the device"
    ))
}

impl<B: Backend> HostView for Array<B> {
    fn view_shape(&self) -> &[usize] {
        &self.shape
    }

    fn to_host(&self) -> Result<Cow<'_, Tensor>> {
        match &self.storage {
            Storage::Host(t) => Ok(Cow::Borrowed(t)),
            Storage::Device { .. } => Ok(Cow::Owned(self.to_tensor()?)),
        }
    }
}

impl<B: Backend> Iterate for Array<B> {
    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn duplicate(&self) -> Result<Self> {
        let storage = match &self.storage {
            Storage::Host(t) => Storage::Host(t.clone()),
            Storage::Device { values, backend } => Storage::Device {
                values: values.duplicate(backend.as_ref())?,
                backend: backend.clone(),
            },
        };
        Ok(Array {
            shape: self.shape.clone(),
            storage,
        })
    }

    fn axpy(&mut self, a: f32, x: &Self) -> Result<()> {
        self.same_shape("axpy", x)?;
        match (&mut self.storage, &x.storage) {
            (Storage::Host(y), Storage::Host(x)) => {
                y.axpy(a, x);
                Ok(())
            }
            (Storage::Device { values, backend }, Storage::Device { values: xv, .. }) => {
                vector::axpy(backend.as_ref(), values, a, xv)
            }
            _ => Err(mixed("axpy")),
        }
    }

    fn scaled(&self, a: f32) -> Result<Self> {
        match &self.storage {
            Storage::Host(t) => Ok(Array::host(t.scaled(a))),
            Storage::Device { values, backend } => {
                let mut out = values.duplicate(backend.as_ref())?;
                vector::scale(backend.as_ref(), &mut out, a)?;
                Array::on_device(backend, &self.shape, out)
            }
        }
    }

    fn zeros_like(&self) -> Result<Self> {
        match &self.storage {
            Storage::Host(t) => Ok(Array::host(t.zeros_like())),
            Storage::Device { backend, .. } => Array::zeros(backend, &self.shape),
        }
    }

    fn dot(&self, x: &Self) -> Result<f64> {
        self.same_shape("dot", x)?;
        match (&self.storage, &x.storage) {
            (Storage::Host(a), Storage::Host(b)) => Ok(a.dot(b)),
            (Storage::Device { values, backend }, Storage::Device { values: xv, .. }) => {
                vector::dot(backend.as_ref(), values, xv)
            }
            _ => Err(mixed("dot")),
        }
    }

    fn clamp(&mut self, lo: f32, hi: f32) -> Result<()> {
        match &mut self.storage {
            Storage::Host(t) => {
                t.clamp(lo, hi);
                Ok(())
            }
            Storage::Device { values, backend } => vector::clamp(backend.as_ref(), values, lo, hi),
        }
    }

    fn relative_change(&self, old: &Self) -> Result<f64> {
        self.same_shape("relative change", old)?;
        match (&self.storage, &old.storage) {
            (Storage::Host(new), Storage::Host(old)) => Ok(crate::optim::relative_change(new, old)),
            (Storage::Device { values, backend }, Storage::Device { values: ov, .. }) => {
                let b = backend.as_ref();
                let n = vector::norm(b, values)?;
                if n == 0.0 {
                    return Ok(0.0);
                }
                Ok(vector::norm(b, &vector::sub(b, values, ov)?)? / n)
            }
            _ => Err(mixed("relative change")),
        }
    }

    fn truth_beside<'a>(&self, host: &'a Tensor) -> Result<Truth<'a, Self>> {
        if host.shape() != self.shape() {
            return Err(Error::shape("ground truth", &self.shape, host.shape()));
        }
        let here = match &self.storage {
            Storage::Host(_) => None,
            Storage::Device { backend, .. } => Some(Array::upload(backend, host)?),
        };
        Ok(Truth { host, here })
    }

    /// On the device, for one image (a batch of one): `‖x − truth‖²` by one reduction, a scalar
    /// download. A batch of several images averages per-image PSNRs (`metrics::psnr`), which needs
    /// per-image sums that the reductions do not take yet: it is computed on the host.
    fn psnr(&self, truth: &Truth<'_, Self>, data_range: f32) -> Result<f64> {
        let one_image = self.shape.len() < 4 || self.shape[0] <= 1;
        match (&self.storage, &truth.here) {
            (
                Storage::Device { values, backend },
                Some(Array {
                    storage: Storage::Device { values: tv, .. },
                    ..
                }),
            ) if one_image => {
                // `truth_beside` checked the shapes.
                crate::metrics::check_range("psnr", data_range)?;
                let b = backend.as_ref();
                let d = vector::sub(b, values, tv)?;
                let mse = vector::dot(b, &d, &d)? / values.len().max(1) as f64;
                Ok(if mse == 0.0 {
                    f64::INFINITY
                } else {
                    10.0 * ((data_range as f64).powi(2) / mse).log10()
                })
            }
            _ => crate::metrics::psnr(&*self.to_host()?, truth.host, data_range),
        }
    }

    fn into_host(self) -> Result<Tensor> {
        match self.storage {
            Storage::Host(t) => Ok(t),
            Storage::Device { .. } => self.to_tensor(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::emulator::Emulator;

    fn sample(shape: &[usize], seed: usize) -> Tensor {
        Tensor::from_fn(shape, |i| {
            (((i * 7919 + seed * 104_729) % 1013) as f32 / 97.0).sin()
        })
    }

    /// Every operation gives the host storage's bits on the device (the element-wise ones) or its
    /// value to f64 rounding (the norms); mixing storages is an error, not a panic.
    #[test]
    fn device_storage_matches_the_host_storage() {
        let backend = Arc::new(Emulator::new().unwrap());
        let shape = [1, 3, 17, 23];
        let (a, b) = (sample(&shape, 1), sample(&shape, 2));
        let mut host = Array::<Emulator>::host(a.clone());
        let mut dev = Array::upload(&backend, &a).unwrap();
        let hb = Array::<Emulator>::host(b.clone());
        let db = Array::upload(&backend, &b).unwrap();
        host.axpy(-0.37, &hb).unwrap();
        dev.axpy(-0.37, &db).unwrap();
        assert_eq!(
            dev.to_tensor().unwrap().data(),
            host.to_tensor().unwrap().data()
        );
        let (hs, ds) = (host.scaled(1.3).unwrap(), dev.scaled(1.3).unwrap());
        assert_eq!(
            ds.to_tensor().unwrap().data(),
            hs.to_tensor().unwrap().data()
        );
        host.clamp(-0.2, 0.4).unwrap();
        dev.clamp(-0.2, 0.4).unwrap();
        assert_eq!(
            dev.to_tensor().unwrap().data(),
            host.to_tensor().unwrap().data()
        );
        let hr = host.relative_change(&hb).unwrap();
        let dr = dev.relative_change(&db).unwrap();
        // The CPU sums the norms in its own order: equal to rounding.
        assert!((hr - dr).abs() <= 1e-6 * hr.abs(), "{hr} vs {dr}");
        let copy = dev.duplicate().unwrap();
        dev.axpy(1.0, &db).unwrap();
        assert_eq!(
            copy.into_host().unwrap().data(),
            host.to_tensor().unwrap().data()
        );
        let e = dev.axpy(1.0, &hb).unwrap_err().to_string();
        assert!(e.contains("host memory and one on the device"), "{e}");
        let small = Array::upload(&backend, &sample(&[1, 1, 2, 2], 3)).unwrap();
        assert!(dev.axpy(1.0, &small).is_err());
    }
}
