//! TEMPORARY until the `nnweights` branch lands `StateDict::load`: reads `.safetensors` (f32) only.

use std::path::Path;

use super::StateDict;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl StateDict {
    pub fn load(path: &Path) -> Result<StateDict> {
        let bytes = std::fs::read(path).map_err(|e| Error::io("reading weights", path, e))?;
        let bad = |r: &str| Error::format(path, r.to_string());
        if bytes.len() < 8 {
            return Err(bad("too short"));
        }
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(
            bytes.get(8..8 + n).ok_or_else(|| bad("header"))?,
        )
        .map_err(|e| bad(&e.to_string()))?;
        let data = &bytes[8 + n..];
        let mut sd = StateDict::new(path.display().to_string());
        for (k, v) in header.as_object().ok_or_else(|| bad("header"))? {
            if k == "__metadata__" {
                continue;
            }
            if v["dtype"] != "F32" {
                return Err(bad("only F32"));
            }
            let shape: Vec<usize> = v["shape"].as_array().ok_or_else(|| bad("shape"))?.iter().map(|x| x.as_u64().unwrap_or(0) as usize).collect();
            let o = v["data_offsets"].as_array().ok_or_else(|| bad("offsets"))?;
            let (a, b) = (o[0].as_u64().unwrap_or(0) as usize, o[1].as_u64().unwrap_or(0) as usize);
            let raw = data.get(a..b).ok_or_else(|| bad("offsets"))?;
            let vals: Vec<f32> = raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            sd.insert(k.clone(), Tensor::from_vec(&shape, vals)?);
        }
        Ok(sd)
    }
}
