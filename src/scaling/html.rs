//! One self-contained HTML page: CSV as tables, figures embedded as PNG data URLs (with the page's
//! own base64: the tree has no base64 crate, and this is the one place that encodes it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::figures::Captioned;
use crate::error::{Error, Result};
use crate::io;

/// A CSV text as an HTML table, the first line as its header.
pub(super) fn csv_table(csv: &str) -> String {
    let mut html = String::from("<table>\n");
    for (k, line) in csv.lines().enumerate() {
        let cell = if k == 0 { "th" } else { "td" };
        html.push_str("<tr>");
        for v in line.split(',') {
            let _ = write!(html, "<{cell}>{}</{cell}>", escape(v));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    html
}

/// Writes the figures as PNG files and `report.html` (title, `body` HTML, then the figures
/// embedded, so the page stands alone) into `dir`; returns the page's path.
pub(super) fn write_page(
    dir: &Path,
    title: &str,
    body: &str,
    figures: Vec<Captioned>,
) -> Result<PathBuf> {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;max-width:1900px;margin:1em auto}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}\
         figure{{margin:1em 0}}</style></head><body>\n<h1>{t}</h1>\n",
        t = escape(title)
    );
    html.push_str(body);
    for (stem, caption, image) in figures {
        let png = dir.join(format!("{stem}.png"));
        image.write_png(&png)?;
        let bytes = std::fs::read(&png).map_err(|e| Error::io("reading figure", &png, e))?;
        let _ = writeln!(
            html,
            "<figure><img alt=\"{stem}\" src=\"data:image/png;base64,{}\"><figcaption>{}</figcaption></figure>",
            base64(&bytes),
            escape(&caption)
        );
    }
    html.push_str("</body></html>\n");
    let path = dir.join("report.html");
    io::write_atomic(&path, html.as_bytes())?;
    Ok(path)
}

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Standard base64 (RFC 4648, padded).
pub(super) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
