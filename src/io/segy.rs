//! SEG-Y (rev 0/1/2) reading and writing, for velocity models and shot records as seismic users
//! have them. Reading accepts IBM and IEEE float, 8/16/32-bit integer samples, big-endian (the
//! standard) or little-endian (rev 2's byte-order constant), extended textual headers, and checks
//! every length against the file. Writing produces rev-1 big-endian IEEE float with an EBCDIC
//! textual header, FFID and trace number in each trace header — what segyio and SU read.

use std::path::Path;

use crate::error::{Error, Result};

const TEXT: usize = 3200;
const BINARY: usize = 400;
const TRACE_HEADER: usize = 240;

/// The traces of a SEG-Y file (all of one length), row-major `traces × samples`.
#[derive(Debug, Clone, PartialEq)]
pub struct Segy {
    pub samples: usize,
    /// Sample interval (µs) from the binary header.
    pub dt_us: u32,
    pub data: Vec<f32>,
    /// Field record number (FFID, bytes 9–12) and trace number within it (bytes 13–16).
    pub ffid: Vec<i32>,
    pub trace_number: Vec<i32>,
}

impl Segy {
    pub fn traces(&self) -> usize {
        self.ffid.len()
    }
}

fn ibm_to_f32(bits: u32) -> f32 {
    let sign = if bits >> 31 == 1 { -1.0 } else { 1.0 };
    let exponent = ((bits >> 24) & 0x7f) as i32 - 64;
    let mantissa = (bits & 0x00ff_ffff) as f64 / (1u64 << 24) as f64;
    (sign * mantissa * 16f64.powi(exponent)) as f32
}

/// Reads a SEG-Y file.
pub fn read_segy(path: &Path) -> Result<Segy> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
    parse_segy(&bytes)
        .map_err(|reason| Error::format(path, format!("not a readable SEG-Y file ({reason})")))
}

fn parse_segy(b: &[u8]) -> std::result::Result<Segy, String> {
    if b.len() < TEXT + BINARY {
        return Err(format!(
            "{} bytes is shorter than the 3600-byte file header",
            b.len()
        ));
    }
    let bin = &b[TEXT..TEXT + BINARY];
    let u16_at = |s: &[u8], at: usize, little: bool| {
        let v = [s[at], s[at + 1]];
        if little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        }
    };
    let valid_format = |f: u16| matches!(f, 1 | 2 | 3 | 5 | 8);
    // Rev 2 byte-order constant 0x01020304 at bytes 3297–3300; otherwise guess from the format code.
    let little = match &bin[96..100] {
        [4, 3, 2, 1] => true,
        [1, 2, 3, 4] => false,
        _ => !valid_format(u16_at(bin, 24, false)) && valid_format(u16_at(bin, 24, true)),
    };
    let dt_us = u16_at(bin, 16, little) as u32;
    let samples = u16_at(bin, 20, little) as usize;
    let format = u16_at(bin, 24, little);
    let extended = u16_at(bin, 304, little) as usize;
    let bytes_per = match format {
        1 | 2 | 5 => 4,
        3 => 2,
        8 => 1,
        f => return Err(format!("unsupported sample format code {f}")),
    };
    if samples == 0 {
        return Err("the binary header gives 0 samples per trace".into());
    }
    let start = TEXT + BINARY + extended * TEXT;
    let trace_len = TRACE_HEADER + samples * bytes_per;
    if b.len() < start || !(b.len() - start).is_multiple_of(trace_len) {
        return Err(format!(
            "{} bytes of traces are not a whole number of {trace_len}-byte traces ({samples} samples of format {format})",
            b.len().saturating_sub(start)
        ));
    }
    let n = (b.len() - start) / trace_len;
    let mut data = Vec::with_capacity(n * samples);
    let (mut ffid, mut trace_number) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for t in 0..n {
        let tr = &b[start + t * trace_len..start + (t + 1) * trace_len];
        let i32_at = |at: usize| {
            let v = [tr[at], tr[at + 1], tr[at + 2], tr[at + 3]];
            if little {
                i32::from_le_bytes(v)
            } else {
                i32::from_be_bytes(v)
            }
        };
        let ns = u16_at(tr, 114, little) as usize;
        if ns != 0 && ns != samples {
            return Err(format!(
                "trace {t} has {ns} samples, the binary header {samples}"
            ));
        }
        ffid.push(i32_at(8));
        trace_number.push(i32_at(12));
        for s in tr[TRACE_HEADER..].chunks_exact(bytes_per) {
            let word = |s: &[u8]| {
                let v = [s[0], s[1], s[2], s[3]];
                if little {
                    u32::from_le_bytes(v)
                } else {
                    u32::from_be_bytes(v)
                }
            };
            data.push(match format {
                1 => ibm_to_f32(word(s)),
                2 => word(s) as i32 as f32,
                5 => f32::from_bits(word(s)),
                3 => u16_at(s, 0, little) as i16 as f32,
                _ => s[0] as i8 as f32,
            });
        }
    }
    Ok(Segy {
        samples,
        dt_us,
        data,
        ffid,
        trace_number,
    })
}

/// EBCDIC code of an ASCII character (letters, digits and common punctuation; others become a space).
fn ebcdic(c: u8) -> u8 {
    match c {
        b'a'..=b'i' => 0x81 + (c - b'a'),
        b'j'..=b'r' => 0x91 + (c - b'j'),
        b's'..=b'z' => 0xa2 + (c - b's'),
        b'A'..=b'I' => 0xc1 + (c - b'A'),
        b'J'..=b'R' => 0xd1 + (c - b'J'),
        b'S'..=b'Z' => 0xe2 + (c - b'S'),
        b'0'..=b'9' => 0xf0 + (c - b'0'),
        b'.' => 0x4b,
        b'(' => 0x4d,
        b'+' => 0x4e,
        b'-' => 0x60,
        b'/' => 0x61,
        b',' => 0x6b,
        b'_' => 0x6d,
        b':' => 0x7a,
        b'=' => 0x7e,
        b')' => 0x5d,
        _ => 0x40,
    }
}

/// Writes `data` (`traces × samples`, row-major) as SEG-Y rev 1, big-endian IEEE float, atomically.
/// `ffid[i]`/`trace_number[i]` label trace `i` (`None`: one record, traces numbered from 1); `lines`
/// go into the textual header (40 lines of 80 characters at most).
pub fn write_segy(
    path: &Path,
    data: &[f32],
    samples: usize,
    dt_us: u32,
    labels: Option<(&[i32], &[i32])>,
    lines: &[String],
) -> Result<()> {
    if samples == 0 || samples > u16::MAX as usize || !data.len().is_multiple_of(samples) {
        return Err(Error::config(
            "segy",
            format!(
                "{} values do not make traces of {samples} samples (1..=65535)",
                data.len()
            ),
        ));
    }
    if dt_us > u16::MAX as u32 {
        return Err(Error::config(
            "segy",
            format!("sample interval {dt_us} µs exceeds 65535 µs"),
        ));
    }
    let n = data.len() / samples;
    if let Some((f, t)) = labels
        && (f.len() != n || t.len() != n)
    {
        return Err(Error::config(
            "segy",
            format!(
                "{n} traces but {} FFIDs and {} trace numbers",
                f.len(),
                t.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(TEXT + BINARY + n * (TRACE_HEADER + 4 * samples));
    for k in 0..40 {
        let line = format!(
            "C{:2} {}",
            k + 1,
            lines.get(k).map(String::as_str).unwrap_or("")
        );
        let mut l: Vec<u8> = line.bytes().take(80).map(ebcdic).collect();
        l.resize(80, 0x40);
        out.extend_from_slice(&l);
    }
    let mut bin = [0u8; BINARY];
    let put16 =
        |buf: &mut [u8], at: usize, v: u16| buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
    let put32 =
        |buf: &mut [u8], at: usize, v: i32| buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    put16(&mut bin, 12, 1); // traces per ensemble
    put16(&mut bin, 16, dt_us as u16);
    put16(&mut bin, 20, samples as u16);
    put16(&mut bin, 24, 5); // IEEE float
    put16(&mut bin, 54, 1); // metres
    put16(&mut bin, 300, 0x0100); // revision 1.0
    put16(&mut bin, 302, 1); // fixed-length traces
    out.extend_from_slice(&bin);
    for (i, trace) in data.chunks_exact(samples).enumerate() {
        let mut h = [0u8; TRACE_HEADER];
        let (ffid, tn) = match labels {
            Some((f, t)) => (f[i], t[i]),
            None => (1, i as i32 + 1),
        };
        put32(&mut h, 0, i as i32 + 1);
        put32(&mut h, 4, i as i32 + 1);
        put32(&mut h, 8, ffid);
        put32(&mut h, 12, tn);
        put16(&mut h, 28, 1); // seismic data
        put16(&mut h, 114, samples as u16);
        put16(&mut h, 116, dt_us as u16);
        out.extend_from_slice(&h);
        for v in trace {
            out.extend_from_slice(&v.to_bits().to_be_bytes());
        }
    }
    super::write_atomic(path, &out)
}

/// Reads raw little-endian float32 values of the given shape (no header), checking the file size.
pub fn read_raw_f32(path: &Path, shape: &[usize]) -> Result<Vec<f32>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match count.and_then(|c| c.checked_mul(4)) {
        Some(need) if need == bytes.len() => Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()),
        _ => Err(Error::format(
            path,
            format!(
                "raw float32 file of {} bytes does not hold shape {shape:?} ({} bytes)",
                bytes.len(),
                count
                    .map(|c| (c * 4).to_string())
                    .unwrap_or_else(|| "too many".into())
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ibm_floats_decode() {
        // 0xC276A000 = −118.625, 0x41100000 = 1.0, 0x42640000 = 100.0 (IBM System/360 examples).
        assert_eq!(ibm_to_f32(0xC276_A000), -118.625);
        assert_eq!(ibm_to_f32(0x4110_0000), 1.0);
        assert_eq!(ibm_to_f32(0x4264_0000), 100.0);
        assert_eq!(ibm_to_f32(0), 0.0);
    }

    #[test]
    fn round_trip_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.sgy");
        let data: Vec<f32> = (0..60).map(|i| i as f32 * 0.5 - 7.0).collect();
        let ffid = [5, 5, 5, 6, 6, 6];
        let tn = [1, 2, 3, 1, 2, 3];
        write_segy(
            &p,
            &data,
            10,
            4000,
            Some((&ffid, &tn)),
            &["tessera test".into()],
        )
        .unwrap();
        let s = read_segy(&p).unwrap();
        assert_eq!((s.samples, s.dt_us, s.traces()), (10, 4000, 6));
        assert_eq!(s.data, data);
        assert_eq!(s.ffid, ffid);
        assert_eq!(s.trace_number, tn);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let e = read_segy(&p).unwrap_err().to_string();
        assert!(e.contains("whole number"), "{e}");
        std::fs::write(&p, &bytes[..100]).unwrap();
        assert!(read_segy(&p).is_err());
        assert!(write_segy(&p, &data, 7, 4000, None, &[]).is_err());
    }
}
