//! NIfTI-1 volumes (`.nii`, `.nii.gz`) to and from tensors, with a header parser of our own.
//!
//! Axis mapping: NIfTI stores voxels x-fastest, then y, then z (then t). Read as a C-order array that
//! is `(Z, Y, X)`, so a 3-D volume `dim = [3, X, Y, Z]` becomes the tensor `(1, 1, D, H, W)` with
//! `D = Z`, `H = Y`, `W = X`, without reordering any data. Other ranks:
//! - 2-D (`dim[0] ≤ 2`): `(1, 1, H, W)` with `H = Y` (1 for a 1-D file), `W = X`;
//! - 4-D (`dim[4] = T > 1`): `(1, T, D, H, W)`, each time point (or volume of a series) a channel;
//! - dims 5–7 must be 1, otherwise the file is rejected.
//!
//! The orientation (qform/sform) is not interpreted and a reconstruction works in array coordinates;
//! the voxel size (`pixdim[1..=3]` in the unit of `xyzt_units`) is read apart, by
//! [`peek_nifti_voxel_size_m`], for scale bars. Data types: uint8, int8, int16, uint16, int32, float32, float64 (codes 2, 256, 4, 512,
//! 8, 16, 64); `scl_slope`/`scl_inter` are applied when the slope is non-zero, as the standard says.
//! The header's claimed size is checked against the bytes actually present before any voxel buffer is
//! allocated, so a corrupt or malicious header cannot trigger a huge allocation.
//!
//! Reference: the NIfTI-1 header, <https://nifti.nimh.nih.gov/pub/dist/src/niftilib/nifti1.h>.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// `sizeof_hdr` of a NIfTI-1 header; also how endianness is detected.
const HEADER_LEN: usize = 348;
/// Header plus the 4-byte extension flag: where a single-file `.nii` written by us puts its voxels.
const DATA_OFFSET: usize = 352;
/// Deflate expands by at most ~1032:1; anything claiming more data than that is lying.
const MAX_GZIP_EXPANSION: u64 = 1100;

/// The voxel types this reader accepts: NIfTI `datatype` code, name, bytes per voxel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DataType {
    U8,
    I8,
    I16,
    U16,
    I32,
    F32,
    F64,
}

impl DataType {
    fn from_code(code: i16) -> std::result::Result<Self, String> {
        Ok(match code {
            2 => DataType::U8,
            256 => DataType::I8,
            4 => DataType::I16,
            512 => DataType::U16,
            8 => DataType::I32,
            16 => DataType::F32,
            64 => DataType::F64,
            other => {
                let name = match other {
                    0 => "unknown",
                    1 => "binary",
                    32 => "complex64",
                    128 => "rgb24",
                    768 => "uint32",
                    1024 => "int64",
                    1280 => "uint64",
                    1536 => "float128",
                    1792 => "complex128",
                    2048 => "complex256",
                    2304 => "rgba32",
                    _ => "not a NIfTI-1 type",
                };
                return Err(format!(
                    "unsupported NIfTI datatype code {other} ({name}); supported: uint8 (2), int8 (256), \
                     int16 (4), uint16 (512), int32 (8), float32 (16), float64 (64)"
                ));
            }
        })
    }

    fn bytes(self) -> usize {
        match self {
            DataType::U8 | DataType::I8 => 1,
            DataType::I16 | DataType::U16 => 2,
            DataType::I32 | DataType::F32 => 4,
            DataType::F64 => 8,
        }
    }
}

/// The header fields that matter for reading voxels.
#[derive(Debug)]
struct Header {
    big_endian: bool,
    /// `dim[1..=7]`, all ≥ 1 (entries beyond `dim[0]` are set to 1).
    dims: [usize; 7],
    datatype: DataType,
    vox_offset: usize,
    scl_slope: f32,
    scl_inter: f32,
    /// `pixdim[1..=3]`: the voxel's size along x, y and z in the unit of `xyzt_units`.
    pixdim: [f32; 3],
    /// `xyzt_units`: bits 0–2 code the spatial unit.
    xyzt_units: u8,
}

impl Header {
    /// The voxel size along x, y and z in metres, where the header states a spatial unit (metre,
    /// millimetre or micrometre) and every size is positive and finite; `None` otherwise.
    fn voxel_size_m(&self) -> Option<[f64; 3]> {
        let metres_per_unit = match self.xyzt_units & 0x07 {
            1 => 1.0,
            2 => 1e-3,
            3 => 1e-6,
            _ => return None,
        };
        let sizes = self.pixdim.map(|d| f64::from(d) * metres_per_unit);
        sizes
            .iter()
            .all(|d| d.is_finite() && *d > 0.0)
            .then_some(sizes)
    }

    fn voxel_count(&self) -> Option<usize> {
        self.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Total file bytes the header claims: offset + voxels × bytes per voxel.
    fn claimed_len(&self) -> std::result::Result<usize, String> {
        self.voxel_count()
            .and_then(|n| n.checked_mul(self.datatype.bytes()))
            .and_then(|b| b.checked_add(self.vox_offset))
            .ok_or_else(|| {
                format!(
                    "header dimensions {:?} overflow the address space",
                    self.dims
                )
            })
    }

    /// The tensor shape for these dimensions (see the module doc for the mapping).
    fn tensor_shape(&self) -> std::result::Result<Vec<usize>, String> {
        let [x, y, z, t, rest @ ..] = self.dims;
        if rest.iter().any(|&d| d > 1) {
            return Err(format!(
                "NIfTI dimensions {:?} have more than 4 non-trivial axes, which is not supported",
                self.dims
            ));
        }
        Ok(if z == 1 && t == 1 {
            vec![1, 1, y, x]
        } else {
            vec![1, t, z, y, x]
        })
    }
}

fn read_i16(b: &[u8], at: usize, be: bool) -> i16 {
    let v = [b[at], b[at + 1]];
    if be {
        i16::from_be_bytes(v)
    } else {
        i16::from_le_bytes(v)
    }
}

fn read_f32(b: &[u8], at: usize, be: bool) -> f32 {
    let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if be {
        f32::from_be_bytes(v)
    } else {
        f32::from_le_bytes(v)
    }
}

/// Parses the 348-byte NIfTI-1 header (offsets from nifti1.h).
fn parse_header(b: &[u8]) -> std::result::Result<Header, String> {
    if b.len() < HEADER_LEN {
        return Err(format!(
            "file is too short for a NIfTI-1 header ({} bytes, need {HEADER_LEN})",
            b.len()
        ));
    }
    let size_le = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let size_be = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let big_endian = match (size_le, size_be) {
        (348, _) => false,
        (_, 348) => true,
        (540, _) | (_, 540) => {
            return Err("NIfTI-2 files are not supported (sizeof_hdr = 540)".into());
        }
        _ => {
            return Err(format!(
                "not a NIfTI-1 file (sizeof_hdr is {size_le}, expected 348)"
            ));
        }
    };
    match &b[344..348] {
        b"n+1\0" => {}
        b"ni1\0" => {
            return Err(
                "two-file NIfTI (.hdr/.img pair) is not supported; convert it to a single .nii"
                    .into(),
            );
        }
        other => return Err(format!("missing NIfTI-1 magic \"n+1\" (found {other:?})")),
    }
    let be = big_endian;
    let ndim = read_i16(b, 40, be);
    if !(1..=7).contains(&ndim) {
        return Err(format!("dim[0] = {ndim} is not a rank between 1 and 7"));
    }
    let mut dims = [1usize; 7];
    for (i, d) in dims.iter_mut().enumerate().take(ndim as usize) {
        let v = read_i16(b, 42 + 2 * i, be);
        if v < 1 {
            return Err(format!("dim[{}] = {v} is not a positive size", i + 1));
        }
        *d = v as usize;
    }
    let datatype = DataType::from_code(read_i16(b, 70, be))?;
    let bitpix = read_i16(b, 72, be);
    if bitpix as usize != 8 * datatype.bytes() {
        return Err(format!(
            "bitpix = {bitpix} does not match datatype {datatype:?} ({} bits)",
            8 * datatype.bytes()
        ));
    }
    let vox_offset = read_f32(b, 108, be);
    if !vox_offset.is_finite() || vox_offset < HEADER_LEN as f32 || vox_offset > 1e12 {
        return Err(format!(
            "vox_offset = {vox_offset} is not a valid data offset (must be ≥ {HEADER_LEN})"
        ));
    }
    Ok(Header {
        big_endian,
        dims,
        datatype,
        vox_offset: vox_offset as usize,
        scl_slope: read_f32(b, 112, be),
        scl_inter: read_f32(b, 116, be),
        pixdim: [
            read_f32(b, 80, be),
            read_f32(b, 84, be),
            read_f32(b, 88, be),
        ],
        xyzt_units: b[123],
    })
}

/// Reads a `.nii` or `.nii.gz` file (gzip is recognised by its signature, not the name).
///
/// See the module documentation for the axis mapping. A missing file gives [`Error::Io`]; anything
/// wrong with its content gives [`Error::Format`] naming the file.
pub fn read_nifti(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
    decode_nifti(&bytes).map_err(|reason| Error::format(path, reason))
}

/// The tensor shape a `.nii` or `.nii.gz` file declares, from its header alone (for a gzip file,
/// only the header is decompressed), so a job is sized before the volume is loaded.
pub fn peek_nifti_shape(path: &Path) -> Result<Vec<usize>> {
    peek_header(path)?
        .tensor_shape()
        .map_err(|reason| Error::format(path, reason))
}

/// The voxel size along x, y and z (the tensor's W, H and D axes) in metres, from the header alone;
/// `Ok(None)` when the file states no spatial unit or a size that is not positive.
pub fn peek_nifti_voxel_size_m(path: &Path) -> Result<Option<[f64; 3]>> {
    Ok(peek_header(path)?.voxel_size_m())
}

/// Reads and parses the header of a `.nii` or `.nii.gz` file without reading its voxels.
fn peek_header(path: &Path) -> Result<Header> {
    let file = std::fs::File::open(path).map_err(|e| Error::io("reading", path, e))?;
    let mut raw = std::io::BufReader::new(file);
    let mut magic = [0u8; 2];
    let n = raw
        .read(&mut magic)
        .map_err(|e| Error::io("reading", path, e))?;
    let head = |r: &mut dyn Read| -> std::io::Result<Vec<u8>> {
        let mut head = Vec::with_capacity(HEADER_LEN);
        r.take(HEADER_LEN as u64).read_to_end(&mut head)?;
        Ok(head)
    };
    let chained = magic[..n].chain(raw);
    let head = if magic[..n] == [0x1F, 0x8B] {
        head(&mut flate2::read::MultiGzDecoder::new(chained))
    } else {
        head(&mut { chained })
    }
    .map_err(|e| Error::format(path, format!("corrupt gzip stream ({e})")))?;
    parse_header(&head).map_err(|reason| Error::format(path, reason))
}

/// Decodes the bytes of a `.nii` or `.nii.gz` file.
pub fn decode_nifti(bytes: &[u8]) -> std::result::Result<Tensor, String> {
    if bytes.is_empty() {
        return Err("NIfTI file is empty".into());
    }
    if bytes.starts_with(&[0x1F, 0x8B]) {
        let (header, data) = gunzip_checked(bytes)?;
        voxels_to_tensor(&header, &data[header.vox_offset..])
    } else {
        let header = parse_header(bytes)?;
        check_len(&header, bytes.len())?;
        voxels_to_tensor(&header, &bytes[header.vox_offset..])
    }
}

/// Fails unless `available` bytes hold everything the header claims.
fn check_len(header: &Header, available: usize) -> std::result::Result<(), String> {
    let claimed = header.claimed_len()?;
    if claimed > available {
        return Err(format!(
            "header claims {:?} voxels of {:?} ({} bytes from offset {}) but the file holds only {} bytes \
             (truncated, or a corrupt header)",
            header.dims,
            header.datatype,
            claimed - header.vox_offset,
            header.vox_offset,
            available
        ));
    }
    Ok(())
}

/// Decompresses a `.nii.gz`: the header first, then at most the bytes it claims, growing the buffer
/// only as data actually arrives.
fn gunzip_checked(gz: &[u8]) -> std::result::Result<(Header, Vec<u8>), String> {
    let bad = |e: std::io::Error| format!("corrupt gzip stream ({e})");
    let mut dec = flate2::read::MultiGzDecoder::new(gz);
    let mut head = vec![0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match dec.read(&mut head[got..]).map_err(bad)? {
            0 => break,
            n => got += n,
        }
    }
    head.truncate(got);
    let header = parse_header(&head)?;
    let claimed = header.claimed_len()?;
    let max_plausible = (gz.len() as u64).saturating_mul(MAX_GZIP_EXPANSION);
    if claimed as u64 > max_plausible {
        return Err(format!(
            "header claims {claimed} bytes but a {}-byte gzip stream cannot hold more than {max_plausible} \
             (corrupt header)",
            gz.len()
        ));
    }
    let mut data = head;
    (&mut dec)
        .take((claimed - HEADER_LEN) as u64)
        .read_to_end(&mut data)
        .map_err(bad)?;
    check_len(&header, data.len())?;
    Ok((header, data))
}

/// Converts the voxel bytes (starting at `vox_offset`) to an f32 tensor, applying scl_slope/inter.
fn voxels_to_tensor(header: &Header, raw: &[u8]) -> std::result::Result<Tensor, String> {
    let n = header.voxel_count().ok_or("voxel count overflows")?;
    let size = header.datatype.bytes();
    let raw = &raw[..n * size];
    let be = header.big_endian;
    macro_rules! convert {
        ($t:ty) => {
            raw.chunks_exact(size)
                .map(|c| {
                    let a = c.try_into().expect("chunk has the type's size");
                    (if be {
                        <$t>::from_be_bytes(a)
                    } else {
                        <$t>::from_le_bytes(a)
                    }) as f32
                })
                .collect::<Vec<f32>>()
        };
    }
    let mut data = match header.datatype {
        DataType::U8 => raw.iter().map(|&v| v as f32).collect(),
        DataType::I8 => raw.iter().map(|&v| v as i8 as f32).collect(),
        DataType::I16 => convert!(i16),
        DataType::U16 => convert!(u16),
        DataType::I32 => convert!(i32),
        DataType::F32 => convert!(f32),
        DataType::F64 => convert!(f64),
    };
    // nifti1.h: "If the scl_slope field is nonzero, then each voxel value in the dataset should be
    // scaled as y = scl_slope * x + scl_inter".
    let (slope, inter) = (header.scl_slope, header.scl_inter);
    if slope != 0.0 && slope.is_finite() && !(slope == 1.0 && inter == 0.0) {
        let inter = if inter.is_finite() { inter as f64 } else { 0.0 };
        for v in &mut data {
            *v = (*v as f64 * slope as f64 + inter) as f32;
        }
    }
    Tensor::from_vec(&header.tensor_shape()?, data).map_err(|e| e.to_string())
}

/// Writes a tensor as a NIfTI-1 float32 file, gzip-compressed when the name ends in `.gz`.
///
/// Accepted shapes (the inverse of [`read_nifti`]'s mapping): `(1, 1, D, H, W)` and `(D, H, W)` →
/// a 3-D volume `X = W, Y = H, Z = D`; `(1, T, D, H, W)` → 4-D with `T` time points; `(1, 1, H, W)` →
/// 2-D. Voxel sizes are 1 mm, the sform/qform are the identity (array coordinates). Gzip uses level 1,
/// as nibabel does: volumes are large and float data compresses little better at higher levels.
pub fn write_nifti(path: &Path, tensor: &Tensor) -> Result<()> {
    let dims: Vec<usize> = match *tensor.shape() {
        [1, 1, d, h, w] | [d, h, w] => vec![w, h, d],
        [1, t, d, h, w] => vec![w, h, d, t],
        [1, 1, h, w] => vec![w, h],
        _ => {
            return Err(Error::Unsupported(format!(
                "writing a tensor of shape {:?} as NIfTI: it must be (1, 1, D, H, W), (D, H, W), \
                 (1, T, D, H, W) or (1, 1, H, W): {}",
                tensor.shape(),
                path.display()
            )));
        }
    };
    if let Some(&too_big) = dims.iter().find(|&&d| d == 0 || d > i16::MAX as usize) {
        return Err(Error::Unsupported(format!(
            "NIfTI-1 axes must be between 1 and 32767 voxels, got {too_big} in shape {:?}: {}",
            tensor.shape(),
            path.display()
        )));
    }
    let bytes = encode_nifti(&dims, tensor.data());
    let gz = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().to_ascii_lowercase().ends_with(".gz"));
    if gz {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(
            Vec::with_capacity(bytes.len() / 2),
            flate2::Compression::fast(),
        );
        let compressed = enc.write_all(&bytes).and_then(|_| enc.finish());
        let compressed = compressed.map_err(|e| Error::io("compressing", path, e))?;
        super::write_atomic(path, &compressed)
    } else {
        super::write_atomic(path, &bytes)
    }
}

/// A little-endian float32 single-file NIfTI-1: header, empty extension flag, voxels.
fn encode_nifti(dims: &[usize], data: &[f32]) -> Vec<u8> {
    let mut h = vec![0u8; DATA_OFFSET];
    let put_i16 = |h: &mut [u8], at: usize, v: i16| h[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put_f32 = |h: &mut [u8], at: usize, v: f32| h[at..at + 4].copy_from_slice(&v.to_le_bytes());
    h[0..4].copy_from_slice(&(HEADER_LEN as i32).to_le_bytes());
    h[38] = b'r'; // `regular`, kept for ANALYZE readers
    put_i16(&mut h, 40, dims.len() as i16);
    for i in 0..7 {
        put_i16(&mut h, 42 + 2 * i, *dims.get(i).unwrap_or(&1) as i16);
    }
    put_i16(&mut h, 70, 16); // datatype float32
    put_i16(&mut h, 72, 32); // bitpix
    for i in 0..8 {
        // pixdim[0] is qfac (+1: right-handed); voxel sizes 1.
        put_f32(&mut h, 76 + 4 * i, 1.0);
    }
    put_f32(&mut h, 108, DATA_OFFSET as f32);
    put_f32(&mut h, 112, 1.0); // scl_slope
    put_f32(&mut h, 116, 0.0); // scl_inter
    h[123] = 2 | 8; // xyzt_units: mm, seconds
    let descrip = b"tessera";
    h[148..148 + descrip.len()].copy_from_slice(descrip);
    // qform_code = sform_code = 1 (scanner) with identity quaternion / affine.
    put_i16(&mut h, 252, 1);
    put_i16(&mut h, 254, 1);
    put_f32(&mut h, 280, 1.0); // srow_x = [1, 0, 0, 0]
    put_f32(&mut h, 296 + 4, 1.0); // srow_y = [0, 1, 0, 0]
    put_f32(&mut h, 312 + 8, 1.0); // srow_z = [0, 0, 1, 0]
    h[344..348].copy_from_slice(b"n+1\0");
    // Bytes 348..352: extension flag, zero = no extensions.
    h.reserve(data.len() * 4);
    for v in data {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_header_parses_back() {
        let bytes = encode_nifti(&[4, 3, 2], &[0.5; 24]);
        let h = parse_header(&bytes).unwrap();
        assert!(!h.big_endian);
        assert_eq!(h.dims, [4, 3, 2, 1, 1, 1, 1]);
        assert_eq!(h.datatype, DataType::F32);
        assert_eq!(h.vox_offset, DATA_OFFSET);
        assert_eq!(h.claimed_len().unwrap(), DATA_OFFSET + 24 * 4);
        assert_eq!(h.tensor_shape().unwrap(), vec![1, 1, 2, 3, 4]);
    }

    #[test]
    fn rejects_unknown_datatype_by_code() {
        let mut bytes = encode_nifti(&[2, 2, 2], &[0.0; 8]);
        bytes[70..72].copy_from_slice(&32i16.to_le_bytes());
        let err = parse_header(&bytes).unwrap_err();
        assert!(err.contains("32") && err.contains("complex64"), "{err}");
    }

    /// Voxel sizes come in metres whatever unit the header states; no unit, or a size that is not
    /// positive and finite, gives none (a scale bar would lie).
    #[test]
    fn voxel_sizes_are_read_in_metres_or_not_at_all() {
        let mut bytes = encode_nifti(&[4, 3, 2], &[0.0; 24]);
        for (i, d) in [0.5f32, 0.25, 2.0].iter().enumerate() {
            bytes[80 + 4 * i..84 + 4 * i].copy_from_slice(&d.to_le_bytes());
        }
        let size = |b: &[u8]| parse_header(b).unwrap().voxel_size_m();
        assert_eq!(size(&bytes), Some([0.5e-3, 0.25e-3, 2e-3]));
        bytes[123] = 1 | 8;
        assert_eq!(size(&bytes), Some([0.5, 0.25, 2.0]));
        bytes[123] = 3;
        let um = size(&bytes).unwrap();
        assert!((um[0] - 0.5e-6).abs() < 1e-15, "{um:?}");
        bytes[123] = 8; // seconds only: no spatial unit
        assert_eq!(size(&bytes), None);
        bytes[123] = 2;
        for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
            let mut b = bytes.clone();
            b[84..88].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(size(&b), None, "pixdim[2] = {bad}");
        }
    }

    /// The peek reads the header of a gzip file as of a plain one, and names a missing file.
    #[test]
    fn voxel_sizes_peek_through_gzip() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("v.nii");
        let mut bytes = encode_nifti(&[4, 3, 2], &[0.0; 24]);
        bytes[80..84].copy_from_slice(&0.5f32.to_le_bytes());
        std::fs::write(&plain, &bytes).unwrap();
        let gz = dir.path().join("v.nii.gz");
        let mut enc =
            flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), Default::default());
        enc.write_all(&bytes).unwrap();
        enc.finish().unwrap();
        for p in [&plain, &gz] {
            assert_eq!(
                peek_nifti_voxel_size_m(p).unwrap(),
                Some([0.5e-3, 1e-3, 1e-3])
            );
        }
        let missing = dir.path().join("gone.nii");
        let err = peek_nifti_voxel_size_m(&missing).unwrap_err().to_string();
        assert!(err.contains("gone.nii"), "{err}");
    }

    #[test]
    fn five_d_is_rejected() {
        let mut bytes = encode_nifti(&[2, 2, 2, 2, 2], &[0.0; 32]);
        bytes[40..42].copy_from_slice(&5i16.to_le_bytes());
        let h = parse_header(&bytes).unwrap();
        assert!(h.tensor_shape().is_err());
    }
}
