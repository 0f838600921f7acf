//! The zip archive reader behind torch.save's files: the central directory, zip64, stored and
//! deflated entries. Every offset and length is checked against the bytes present.

use std::borrow::Cow;
use std::io::Read;

pub(super) struct ZipEntry {
    pub(super) name: String,
    pub(super) method: u16,
    pub(super) flags: u16,
    pub(super) local_header: usize,
    pub(super) compressed: usize,
    pub(super) uncompressed: usize,
}

pub(super) struct Zip<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) entries: Vec<ZipEntry>,
}

pub(super) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}
pub(super) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}
pub(super) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

impl<'a> Zip<'a> {
    /// Reads the central directory (APPNOTE.TXT 4.3.12–4.3.16, zip64 in 4.3.14 and 4.5.3).
    pub(super) fn parse(bytes: &'a [u8]) -> std::result::Result<Self, String> {
        const EOCD: u32 = 0x0605_4b50;
        let too_short = || "truncated (no end-of-central-directory record)".to_string();
        let search_from = bytes.len().checked_sub(22).ok_or_else(too_short)?;
        let search_to = search_from.saturating_sub(u16::MAX as usize);
        let eocd = (search_to..=search_from)
            .rev()
            .find(|&i| u32_at(bytes, i) == Some(EOCD))
            .ok_or_else(too_short)?;
        let mut count = u64::from(u16_at(bytes, eocd + 10).ok_or_else(too_short)?);
        let mut cd_size = u64::from(u32_at(bytes, eocd + 12).ok_or_else(too_short)?);
        let mut cd_offset = u64::from(u32_at(bytes, eocd + 16).ok_or_else(too_short)?);
        if count == 0xffff || cd_size == 0xffff_ffff || cd_offset == 0xffff_ffff {
            // zip64: a locator just before the EOCD points at the zip64 EOCD record.
            let bad = || "broken zip64 end-of-central-directory record".to_string();
            let locator = eocd.checked_sub(20).ok_or_else(bad)?;
            if u32_at(bytes, locator) != Some(0x0706_4b50) {
                return Err(bad());
            }
            let record =
                usize::try_from(u64_at(bytes, locator + 8).ok_or_else(bad)?).map_err(|_| bad())?;
            if u32_at(bytes, record) != Some(0x0606_4b50) {
                return Err(bad());
            }
            count = u64_at(bytes, record + 32).ok_or_else(bad)?;
            cd_size = u64_at(bytes, record + 40).ok_or_else(bad)?;
            cd_offset = u64_at(bytes, record + 48).ok_or_else(bad)?;
        }
        let cd = usize::try_from(cd_offset)
            .ok()
            .zip(usize::try_from(cd_size).ok())
            .and_then(|(o, s)| bytes.get(o..o.checked_add(s)?))
            .ok_or("central directory lies outside the file")?;
        // Each central entry takes at least 46 bytes: a larger count is a lie, not an allocation.
        if count > (cd.len() / 46) as u64 {
            return Err(format!(
                "central directory claims {count} entries in {} bytes",
                cd.len()
            ));
        }
        let mut entries = Vec::with_capacity(count as usize);
        let mut at = 0usize;
        for i in 0..count {
            let bad = || format!("central directory entry {i} is truncated or corrupt");
            if u32_at(cd, at) != Some(0x0201_4b50) {
                return Err(bad());
            }
            let flags = u16_at(cd, at + 8).ok_or_else(bad)?;
            let method = u16_at(cd, at + 10).ok_or_else(bad)?;
            let mut compressed = u64::from(u32_at(cd, at + 20).ok_or_else(bad)?);
            let mut uncompressed = u64::from(u32_at(cd, at + 24).ok_or_else(bad)?);
            let name_len = usize::from(u16_at(cd, at + 28).ok_or_else(bad)?);
            let extra_len = usize::from(u16_at(cd, at + 30).ok_or_else(bad)?);
            let comment_len = usize::from(u16_at(cd, at + 32).ok_or_else(bad)?);
            let mut local = u64::from(u32_at(cd, at + 42).ok_or_else(bad)?);
            let name = cd.get(at + 46..at + 46 + name_len).ok_or_else(bad)?;
            let extra = cd
                .get(at + 46 + name_len..at + 46 + name_len + extra_len)
                .ok_or_else(bad)?;
            // zip64 extended information (header id 1): the 64-bit values, in this order, of the
            // fields whose 32-bit slot holds 0xffffffff.
            let mut e = 0;
            while e + 4 <= extra.len() {
                let id = u16_at(extra, e).ok_or_else(bad)?;
                let len = usize::from(u16_at(extra, e + 2).ok_or_else(bad)?);
                let body = extra.get(e + 4..e + 4 + len).ok_or_else(bad)?;
                if id == 1 {
                    let mut f = 0;
                    for field in [&mut uncompressed, &mut compressed, &mut local] {
                        if *field == 0xffff_ffff {
                            *field = u64_at(body, f).ok_or_else(bad)?;
                            f += 8;
                        }
                    }
                }
                e += 4 + len;
            }
            let to_usize = |v: u64| usize::try_from(v).map_err(|_| bad());
            entries.push(ZipEntry {
                name: String::from_utf8_lossy(name).into_owned(),
                method,
                flags,
                local_header: to_usize(local)?,
                compressed: to_usize(compressed)?,
                uncompressed: to_usize(uncompressed)?,
            });
            at += 46 + name_len + extra_len + comment_len;
        }
        Ok(Zip { bytes, entries })
    }

    pub(super) fn find(&self, name: &str) -> Option<&ZipEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// An entry's content: borrowed when stored (torch.save's case), inflated when deflated.
    pub(super) fn read(&self, e: &ZipEntry) -> std::result::Result<Cow<'a, [u8]>, String> {
        let bad = |what: &str| format!("entry `{}`: {what}", e.name);
        if e.flags & 1 != 0 {
            return Err(bad("encrypted"));
        }
        let h = e.local_header;
        if u32_at(self.bytes, h) != Some(0x0403_4b50) {
            return Err(bad("local header missing"));
        }
        let name_len = usize::from(u16_at(self.bytes, h + 26).ok_or_else(|| bad("truncated"))?);
        let extra_len = usize::from(u16_at(self.bytes, h + 28).ok_or_else(|| bad("truncated"))?);
        let start = h + 30 + name_len + extra_len;
        let data = start
            .checked_add(e.compressed)
            .and_then(|end| self.bytes.get(start..end))
            .ok_or_else(|| bad("data extends past the end of the file"))?;
        match e.method {
            0 if e.compressed == e.uncompressed => Ok(Cow::Borrowed(data)),
            0 => Err(bad("stored sizes disagree")),
            8 => {
                // Deflate expands at most ~1032×; a larger claim is corrupt. Beyond that, inflating
                // to more than a few times the archive is refused rather than allocated (torch.save
                // itself never compresses).
                let limit = self.bytes.len().saturating_mul(8).saturating_add(64 << 20);
                if e.uncompressed / 1032 > e.compressed + 1 || e.uncompressed > limit {
                    return Err(bad("implausible uncompressed size"));
                }
                let mut out = Vec::with_capacity(e.uncompressed);
                flate2::read::DeflateDecoder::new(data)
                    .take(e.uncompressed as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|err| bad(&format!("inflating: {err}")))?;
                if out.len() != e.uncompressed {
                    return Err(bad("inflated size disagrees with the directory"));
                }
                Ok(Cow::Owned(out))
            }
            m => Err(bad(&format!("compression method {m} is not supported"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zip_offsets_near_usize_max_are_errors() {
        // One central-directory entry whose local-header offset comes from a zip64 extra field
        // holding u64::MAX - 1, then the end-of-central-directory record.
        let mut cd = Vec::new();
        cd.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        cd.extend_from_slice(&[0; 16]); // versions, flags, method, time, date, crc
        cd.extend_from_slice(&4u32.to_le_bytes()); // compressed
        cd.extend_from_slice(&4u32.to_le_bytes()); // uncompressed
        cd.extend_from_slice(&5u16.to_le_bytes()); // name length
        cd.extend_from_slice(&12u16.to_le_bytes()); // extra length
        cd.extend_from_slice(&[0; 10]); // comment length, disk, attributes
        cd.extend_from_slice(&0xffff_ffffu32.to_le_bytes()); // local header offset → zip64
        cd.extend_from_slice(b"a/x.y");
        cd.extend_from_slice(&1u16.to_le_bytes());
        cd.extend_from_slice(&8u16.to_le_bytes());
        cd.extend_from_slice(&(u64::MAX - 1).to_le_bytes());
        let mut zip = cd.clone();
        zip.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        zip.extend_from_slice(&[0; 4]);
        zip.extend_from_slice(&1u16.to_le_bytes());
        zip.extend_from_slice(&1u16.to_le_bytes());
        zip.extend_from_slice(&(cd.len() as u32).to_le_bytes());
        zip.extend_from_slice(&0u32.to_le_bytes());
        zip.extend_from_slice(&0u16.to_le_bytes());
        let z = Zip::parse(&zip).unwrap();
        assert_eq!(z.entries[0].local_header as u64, u64::MAX - 1);
        let e = z.read(&z.entries[0]).err().unwrap();
        assert!(e.contains("local header"), "{e}");
    }
}
