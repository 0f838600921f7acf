//! PNG, JPEG and TIFF images to and from `(1, C, H, W)` tensors.
//!
//! Reading: PNG and JPEG go through the `image` crate, TIFF through the `tiff` crate directly (the
//! `image` crate cannot return single-channel float TIFFs, the common case for scientific data).
//! 8- and 16-bit samples are scaled to [0, 1]; float samples are kept as they are. Gray images become
//! `(1, 1, H, W)`, colour images `(1, 3, H, W)`; an alpha channel is dropped. Only the first page of a
//! multi-page TIFF is read.
//!
//! Writing: [`write_png`] (8-bit) and [`write_png16`] (16-bit) clamp to [0, 1]; [`write_tiff_f32`]
//! keeps values as they are. Files are encoded in memory and written with [`super::write_atomic`].

use std::io::Cursor;
use std::path::Path;

use image::{DynamicImage, ExtendedColorType, ImageEncoder, ImageFormat};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Decoders may allocate at most this many bytes per byte of input (or the crates' default limits,
/// whichever is larger). Deflate cannot expand by more than ~1032:1, so an honest file always fits,
/// while a tiny file whose header claims a gigantic image is rejected before the allocation.
const MAX_EXPANSION: u64 = 2048;
const DEFAULT_ALLOC_LIMIT: u64 = 512 << 20;

/// The container formats this module reads, recognised by their leading bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Container {
    Png,
    Jpeg,
    Tiff,
}

fn sniff(bytes: &[u8]) -> Option<Container> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Container::Png)
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Container::Jpeg)
    } else if bytes.starts_with(b"II*\0")
        || bytes.starts_with(b"MM\0*")
        || bytes.starts_with(b"II+\0")
        || bytes.starts_with(b"MM\0+")
    {
        Some(Container::Tiff)
    } else {
        None
    }
}

/// Reads a PNG, JPEG or TIFF image as `(1, 1, H, W)` (gray) or `(1, 3, H, W)` (colour).
///
/// The format is recognised from the file's signature, not its extension. 8-bit and 16-bit samples
/// are divided by 255 and 65535; float TIFF samples are returned unchanged; other integer TIFF sample
/// types (i8…i64, u32, u64) keep their raw values. An alpha channel (gray+alpha, RGBA) is dropped,
/// not composited. A missing or unreadable file gives [`Error::Io`]; an empty, truncated or corrupt one
/// gives [`Error::Format`] naming the file.
pub fn read_image(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
    decode_image(&bytes).map_err(|reason| Error::format(path, reason))
}

/// The shape `(1, C, H, W)` a PNG, JPEG or TIFF file declares, read from its header alone (the
/// pixels are not decoded), so that a job is sized before the image is loaded.
pub fn peek_image_shape(path: &Path) -> Result<Vec<usize>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io("reading", path, e))?;
    let (c, h, w) =
        header_dims(std::io::BufReader::new(file)).map_err(|reason| Error::format(path, reason))?;
    Ok(vec![1, c, h, w])
}

/// `(C, H, W)` of the decoded tensor, from the header of the image `r` holds.
fn header_dims(
    mut r: impl std::io::BufRead + std::io::Seek,
) -> std::result::Result<(usize, usize, usize), String> {
    let mut magic = [0u8; 8];
    let n = r.read(&mut magic).map_err(|e| e.to_string())?;
    r.rewind().map_err(|e| e.to_string())?;
    let format = match sniff(&magic[..n]) {
        None if n == 0 => return Err("image file is empty".into()),
        None => {
            return Err("not a PNG, JPEG or TIFF image (unrecognised file signature)".into());
        }
        Some(Container::Tiff) => {
            use tiff::ColorType as T;
            let bad = |e: tiff::TiffError| format!("cannot read the TIFF header ({e})");
            let mut dec = tiff::decoder::Decoder::new(r).map_err(bad)?;
            let (w, h) = dec.dimensions().map_err(bad)?;
            let c = match dec.colortype().map_err(bad)? {
                T::Gray(_) | T::GrayA(_) => 1,
                _ => 3,
            };
            return Ok((c, h as usize, w as usize));
        }
        Some(Container::Png) => ImageFormat::Png,
        Some(Container::Jpeg) => ImageFormat::Jpeg,
    };
    use image::ImageDecoder;
    let dec = image::ImageReader::with_format(r, format)
        .into_decoder()
        .map_err(|e| format!("cannot read the {format:?} header ({e})"))?;
    let (w, h) = dec.dimensions();
    let c = if dec.color_type().has_color() { 3 } else { 1 };
    Ok((c, h as usize, w as usize))
}

/// Decodes image bytes; the error says what is wrong with them.
pub fn decode_image(bytes: &[u8]) -> std::result::Result<Tensor, String> {
    if bytes.is_empty() {
        return Err("image file is empty".into());
    }
    // The header first: an image larger than this process can hold as floats is refused before a
    // decoder allocates for it (a few MB of PNG may declare 60000² pixels).
    let (c, h, w) = header_dims(Cursor::new(bytes))?;
    let float_bytes = [c, h, w, 4]
        .iter()
        .fold(1u64, |n, &d| n.saturating_mul(d as u64));
    if let Some(available) = crate::heap::available_bytes()
        && float_bytes > available
    {
        return Err(format!(
            "not enough memory: the image declares {w}×{h} pixels × {c} channel(s), {} as \
             floats, but only {} are available",
            crate::error::human_bytes(float_bytes),
            crate::error::human_bytes(available)
        ));
    }
    let alloc_limit = (bytes.len() as u64)
        .saturating_mul(MAX_EXPANSION)
        .max(DEFAULT_ALLOC_LIMIT);
    match sniff(bytes) {
        Some(Container::Tiff) => decode_tiff(bytes, alloc_limit),
        Some(Container::Png) => decode_raster(bytes, ImageFormat::Png, alloc_limit),
        Some(Container::Jpeg) => decode_raster(bytes, ImageFormat::Jpeg, alloc_limit),
        None => Err("not a PNG, JPEG or TIFF image (unrecognised file signature)".into()),
    }
}

fn decode_raster(
    bytes: &[u8],
    format: ImageFormat,
    alloc_limit: u64,
) -> std::result::Result<Tensor, String> {
    let name = format!("{format:?}").to_uppercase();
    let mut reader = image::ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(alloc_limit);
    reader.limits(limits);
    let img = reader
        .decode()
        .map_err(|e| format!("cannot decode {name} image ({e})"))?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let (channels, data): (usize, Vec<f32>) = match img {
        DynamicImage::ImageLuma8(b) => (1, scale(b.as_raw(), 1, 1, 255.0)),
        DynamicImage::ImageLumaA8(b) => (1, scale(b.as_raw(), 2, 1, 255.0)),
        DynamicImage::ImageRgb8(b) => (3, scale(b.as_raw(), 3, 3, 255.0)),
        DynamicImage::ImageRgba8(b) => (3, scale(b.as_raw(), 4, 3, 255.0)),
        DynamicImage::ImageLuma16(b) => (1, scale(b.as_raw(), 1, 1, 65535.0)),
        DynamicImage::ImageLumaA16(b) => (1, scale(b.as_raw(), 2, 1, 65535.0)),
        DynamicImage::ImageRgb16(b) => (3, scale(b.as_raw(), 3, 3, 65535.0)),
        DynamicImage::ImageRgba16(b) => (3, scale(b.as_raw(), 4, 3, 65535.0)),
        DynamicImage::ImageRgb32F(b) => (3, scale(b.as_raw(), 3, 3, 1.0)),
        DynamicImage::ImageRgba32F(b) => (3, scale(b.as_raw(), 4, 3, 1.0)),
        other => {
            let b = other.to_rgb32f();
            (3, scale(b.as_raw(), 3, 3, 1.0))
        }
    };
    planar_tensor(&data, channels, h, w)
}

fn decode_tiff(bytes: &[u8], alloc_limit: u64) -> std::result::Result<Tensor, String> {
    use tiff::ColorType as T;
    use tiff::decoder::{Decoder, DecodingResult as D, Limits};

    let bad = |e: tiff::TiffError| format!("cannot decode TIFF image ({e})");
    let mut limits = Limits::default();
    let limit = usize::try_from(alloc_limit).unwrap_or(usize::MAX);
    limits.decoding_buffer_size = limits.decoding_buffer_size.max(limit);
    limits.intermediate_buffer_size = limits.intermediate_buffer_size.max(limit);
    let mut dec = Decoder::new(Cursor::new(bytes))
        .map_err(bad)?
        .with_limits(limits);
    let (w, h) = dec.dimensions().map_err(bad)?;
    let (w, h) = (w as usize, h as usize);
    let color = dec.colortype().map_err(bad)?;
    let (stride, keep, depth) = match color {
        T::Gray(d) => (1, 1, d),
        T::GrayA(d) => (2, 1, d),
        T::RGB(d) => (3, 3, d),
        T::RGBA(d) => (4, 3, d),
        other => return Err(format!("unsupported TIFF colour type {other:?}")),
    };
    let result = dec.read_image().map_err(bad)?;
    let wrong_depth = |expected: u8| {
        Err(format!(
            "unsupported TIFF bit depth {depth} (only 8, 16, 32 and 64 bits per sample; expected {expected})"
        ))
    };
    let data: Vec<f32> = match result {
        D::U8(v) if depth == 8 => scale(&v, stride, keep, 255.0),
        D::U8(_) => return wrong_depth(8),
        D::U16(v) => scale(&v, stride, keep, 65535.0),
        D::F32(v) => scale(&v, stride, keep, 1.0),
        D::F64(v) => scale(&v, stride, keep, 1.0),
        D::F16(v) => {
            let v: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
            scale(&v, stride, keep, 1.0)
        }
        D::U32(v) => scale(&v, stride, keep, 1.0),
        D::U64(v) => scale(&v, stride, keep, 1.0),
        D::I8(v) => scale(&v, stride, keep, 1.0),
        D::I16(v) => scale(&v, stride, keep, 1.0),
        D::I32(v) => scale(&v, stride, keep, 1.0),
        D::I64(v) => scale(&v, stride, keep, 1.0),
    };
    if data.len() != w * h * keep {
        // The tiff crate's `read_image` returns only the first plane of planar (band-separate) files.
        return Err(format!(
            "TIFF decoded to {} samples, expected {w}×{h}×{keep} (planar-configuration TIFFs are not supported)",
            data.len()
        ));
    }
    planar_tensor(&data, keep, h, w)
}

/// Sample types that convert to f32 for [`scale`].
trait Sample: Copy {
    fn to_f32(self) -> f32;
}
macro_rules! sample_as {
    ($($t:ty),*) => {$(impl Sample for $t { fn to_f32(self) -> f32 { self as f32 } })*};
}
sample_as!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

/// Interleaved samples with `stride` values per pixel → the first `keep` of them divided by `max`,
/// still interleaved.
fn scale<T: Sample>(raw: &[T], stride: usize, keep: usize, max: f32) -> Vec<f32> {
    // Division, not multiplication by 1/max: v/255 is then the correctly rounded f32 (51 → 0.2).
    let mut out = Vec::with_capacity(raw.len() / stride * keep);
    for px in raw.chunks_exact(stride) {
        out.extend(px[..keep].iter().map(|&v| v.to_f32() / max));
    }
    out
}

/// Interleaved `(H, W, C)` values → a planar `(1, C, H, W)` tensor.
fn planar_tensor(
    interleaved: &[f32],
    channels: usize,
    h: usize,
    w: usize,
) -> std::result::Result<Tensor, String> {
    if interleaved.len() != channels * h * w {
        return Err(format!(
            "decoder returned {} samples for a {w}×{h}×{channels} image",
            interleaved.len()
        ));
    }
    let plane = h * w;
    let mut data = vec![0.0f32; channels * plane];
    for (i, px) in interleaved.chunks_exact(channels).enumerate() {
        for (c, &v) in px.iter().enumerate() {
            data[c * plane + i] = v;
        }
    }
    Tensor::from_vec(&[1, channels, h, w], data).map_err(|e| e.to_string())
}

/// Checks that `tensor` is `(1, 1|3, H, W)` with H, W fitting in u32; returns `(C, H, W)`.
fn image_dims(tensor: &Tensor, what: &str, path: &Path) -> Result<(usize, usize, usize)> {
    match *tensor.shape() {
        [1, c @ (1 | 3), h, w]
            if h > 0 && w > 0 && u32::try_from(h).is_ok() && u32::try_from(w).is_ok() =>
        {
            Ok((c, h, w))
        }
        _ => Err(Error::Unsupported(format!(
            "writing a tensor of shape {:?} as {what}: it must be (1, 1, H, W) or (1, 3, H, W): {}",
            tensor.shape(),
            path.display()
        ))),
    }
}

/// Planar `(1, C, H, W)` data → interleaved `(H, W, C)` values mapped by `f`.
fn interleave<T>(tensor: &Tensor, channels: usize, f: impl Fn(f32) -> T) -> Vec<T> {
    let plane = tensor.plane_len();
    let data = tensor.data();
    let mut out = Vec::with_capacity(data.len());
    for i in 0..plane {
        for c in 0..channels {
            out.push(f(data[c * plane + i]));
        }
    }
    out
}

/// Writes a `(1, 1|3, H, W)` tensor as an 8-bit PNG; values are clamped to [0, 1] (NaN → 0).
pub fn write_png(path: &Path, tensor: &Tensor) -> Result<()> {
    let (c, h, w) = image_dims(tensor, "PNG", path)?;
    let raw = interleave(tensor, c, |v| (v.clamp(0.0, 1.0) * 255.0).round() as u8);
    let color = if c == 1 {
        ExtendedColorType::L8
    } else {
        ExtendedColorType::Rgb8
    };
    encode_png(path, &raw, w, h, color)
}

/// Writes a `(1, 1|3, H, W)` tensor as a 16-bit PNG; values are clamped to [0, 1] (NaN → 0).
pub fn write_png16(path: &Path, tensor: &Tensor) -> Result<()> {
    let (c, h, w) = image_dims(tensor, "PNG", path)?;
    let samples = interleave(tensor, c, |v| (v.clamp(0.0, 1.0) * 65535.0).round() as u16);
    // PngEncoder takes 16-bit samples as native-endian bytes and swaps them itself.
    let raw: Vec<u8> = samples.iter().flat_map(|s| s.to_ne_bytes()).collect();
    let color = if c == 1 {
        ExtendedColorType::L16
    } else {
        ExtendedColorType::Rgb16
    };
    encode_png(path, &raw, w, h, color)
}

/// Writes interleaved 8-bit RGB pixels (`width × height × 3`, rows top to bottom) as a PNG.
pub fn encode_png_rgb8(path: &Path, rgb: &[u8], width: u32, height: u32) -> Result<()> {
    if rgb.len() != width as usize * height as usize * 3 {
        return Err(Error::shape(
            "RGB image",
            &[height as usize, width as usize, 3],
            &[rgb.len()],
        ));
    }
    encode_png(
        path,
        rgb,
        width as usize,
        height as usize,
        ExtendedColorType::Rgb8,
    )
}

fn encode_png(path: &Path, raw: &[u8], w: usize, h: usize, color: ExtendedColorType) -> Result<()> {
    let mut buf = Vec::new();
    image::codecs::png::PngEncoder::new(&mut buf)
        .write_image(raw, w as u32, h as u32, color)
        .map_err(|e| Error::format(path, format!("cannot encode PNG ({e})")))?;
    super::write_atomic(path, &buf)
}

/// Writes a `(1, 1|3, H, W)` tensor as an uncompressed 32-bit float TIFF, values unchanged.
pub fn write_tiff_f32(path: &Path, tensor: &Tensor) -> Result<()> {
    use tiff::encoder::{TiffEncoder, colortype};

    let (c, h, w) = image_dims(tensor, "TIFF", path)?;
    let raw = interleave(tensor, c, |v| v);
    let mut buf = Cursor::new(Vec::new());
    let encoded = TiffEncoder::new(&mut buf).and_then(|mut enc| {
        if c == 1 {
            enc.write_image::<colortype::Gray32Float>(w as u32, h as u32, &raw)
        } else {
            enc.write_image::<colortype::RGB32Float>(w as u32, h as u32, &raw)
        }
    });
    encoded.map_err(|e| Error::format(path, format!("cannot encode TIFF ({e})")))?;
    super::write_atomic(path, buf.get_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniff_recognises_signatures() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nxxxx"), Some(Container::Png));
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some(Container::Jpeg));
        assert_eq!(sniff(b"II*\0...."), Some(Container::Tiff));
        assert_eq!(sniff(b"MM\0*...."), Some(Container::Tiff));
        assert_eq!(sniff(b"GIF89a"), None);
    }

    #[test]
    fn planar_tensor_deinterleaves() {
        // Two pixels, RGB: (1,2,3), (4,5,6) → planes R=[1,4], G=[2,5], B=[3,6].
        let t = planar_tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3, 1, 2).unwrap();
        assert_eq!(t.data(), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn scale_drops_alpha() {
        let v = scale(&[255u8, 0, 51, 7, 0, 255, 0, 9], 4, 3, 255.0);
        assert_eq!(v, vec![1.0, 0.0, 0.2, 0.0, 1.0, 0.0]);
    }
}
