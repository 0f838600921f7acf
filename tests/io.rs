//! File formats, built-in samples and metrics: round trips, corrupt inputs, and known values.

use std::io::Write;
use std::path::{Path, PathBuf};

use tessera::io::{self, FileKind};
use tessera::metrics::{mse, psnr, ssim};
use tessera::samples::{self, Sample};
use tessera::{Error, Tensor};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A deterministic pseudo-random tensor in [0, 1).
fn ramp(shape: &[usize], seed: u32) -> Tensor {
    Tensor::from_fn(shape, |i| {
        let v = (i as u32)
            .wrapping_mul(2_654_435_761)
            .wrapping_add(seed.wrapping_mul(40_503));
        (v >> 8) as f32 / (1u32 << 24) as f32
    })
}

fn assert_format_error_names(err: Error, path: &Path) {
    let msg = err.to_string();
    assert!(
        matches!(err, Error::Format { .. }),
        "expected a format error, got {err:?}"
    );
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

// ------------------------------------------------------------------------------------------------
// Images
// ------------------------------------------------------------------------------------------------

#[test]
fn png8_gray_round_trip_is_exact_on_the_8bit_grid() {
    let dir = tmp();
    let p = dir.path().join("g.png");
    let t = Tensor::from_fn(&[1, 1, 7, 9], |i| (i * 4 % 256) as f32 / 255.0);
    io::write_png(&p, &t).unwrap();
    let back = io::read_image(&p).unwrap();
    assert_eq!(back.shape(), &[1, 1, 7, 9]);
    assert_eq!(back, t);
}

#[test]
fn png8_rgb_round_trip_within_quantisation() {
    let dir = tmp();
    let p = dir.path().join("c.png");
    let t = ramp(&[1, 3, 13, 17], 1);
    io::write_png(&p, &t).unwrap();
    let back = io::read_image(&p).unwrap();
    assert_eq!(back.shape(), &[1, 3, 13, 17]);
    assert!(back.max_abs_diff(&t) <= 0.5 / 255.0 + 1e-7);
    // Channel order survives: planes are not swapped or interleaved wrongly.
    let plane = 13 * 17;
    assert!(
        back.data()[..plane]
            .iter()
            .zip(&t.data()[..plane])
            .all(|(a, b)| (a - b).abs() < 0.003)
    );
}

#[test]
fn png16_round_trip_within_quantisation() {
    let dir = tmp();
    let p = dir.path().join("c16.png");
    let t = ramp(&[1, 3, 5, 6], 2);
    io::write_png16(&p, &t).unwrap();
    let back = io::read_image(&p).unwrap();
    assert!(back.max_abs_diff(&t) <= 0.5 / 65535.0 + 1e-7);
}

#[test]
fn png_clamps_out_of_range_and_nan() {
    let dir = tmp();
    let p = dir.path().join("clamp.png");
    let t = Tensor::from_vec(&[1, 1, 1, 4], vec![-0.5, 1.7, f32::NAN, 0.5]).unwrap();
    io::write_png(&p, &t).unwrap();
    let back = io::read_image(&p).unwrap();
    assert_eq!(back.data(), &[0.0, 1.0, 0.0, 128.0 / 255.0]);
}

#[test]
fn tiff_f32_round_trip_keeps_values_exactly() {
    let dir = tmp();
    for c in [1, 3] {
        let p = dir.path().join(format!("f{c}.tif"));
        let mut t = ramp(&[1, c, 11, 8], 3);
        t.map_inplace(|v| v * 40.0 - 7.5); // outside [0, 1]: float TIFF must not clamp or scale
        io::write_tiff_f32(&p, &t).unwrap();
        assert_eq!(io::read_image(&p).unwrap(), t);
    }
}

#[test]
fn tiff_16bit_gray_is_scaled_to_unit_range() {
    use tiff::encoder::{TiffEncoder, colortype::Gray16};
    let dir = tmp();
    let p = dir.path().join("g16.tiff");
    let mut f = std::fs::File::create(&p).unwrap();
    TiffEncoder::new(&mut f)
        .unwrap()
        .write_image::<Gray16>(3, 1, &[0, 32768, 65535])
        .unwrap();
    drop(f);
    let t = io::read_image(&p).unwrap();
    assert_eq!(t.shape(), &[1, 1, 1, 3]);
    assert_eq!(t.data(), &[0.0, 32768.0 / 65535.0, 1.0]);
}

#[test]
fn jpeg_reads_as_rgb_and_gray() {
    use image::ImageEncoder;
    let dir = tmp();
    let (w, h) = (24u32, 16u32);
    let rgb: Vec<u8> = (0..w * h).flat_map(|_| [200u8, 100, 50]).collect();
    let p = dir.path().join("c.jpg");
    let mut buf = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut buf, 95)
        .write_image(&rgb, w, h, image::ExtendedColorType::Rgb8)
        .unwrap();
    std::fs::write(&p, &buf).unwrap();
    let t = io::read_image(&p).unwrap();
    assert_eq!(t.shape(), &[1, 3, 16, 24]);
    let mean = |c: usize| t.plane(c).iter().sum::<f32>() / (w * h) as f32;
    for (c, want) in [200.0, 100.0, 50.0].iter().enumerate() {
        assert!(
            (mean(c) - want / 255.0).abs() < 0.02,
            "channel {c}: {}",
            mean(c)
        );
    }

    let gray = vec![77u8; (w * h) as usize];
    let p = dir.path().join("g.jpeg");
    let mut buf = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut buf, 95)
        .write_image(&gray, w, h, image::ExtendedColorType::L8)
        .unwrap();
    std::fs::write(&p, &buf).unwrap();
    let t = io::read_array(&p).unwrap();
    assert_eq!(t.shape(), &[1, 1, 16, 24]);
    assert!(t.data().iter().all(|&v| (v - 77.0 / 255.0).abs() < 0.01));
}

#[test]
fn rgba_png_drops_alpha() {
    let dir = tmp();
    let p = dir.path().join("rgba.png");
    let img = image::RgbaImage::from_raw(2, 1, vec![255, 0, 0, 10, 0, 255, 0, 200]).unwrap();
    img.save(&p).unwrap();
    let t = io::read_image(&p).unwrap();
    assert_eq!(t.shape(), &[1, 3, 1, 2]);
    assert_eq!(t.data(), &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
}

#[test]
fn image_writers_reject_wrong_shapes() {
    let dir = tmp();
    let p = dir.path().join("x.png");
    for shape in [
        vec![1, 2, 4, 4],
        vec![2, 3, 4, 4],
        vec![4, 4],
        vec![1, 1, 2, 4, 4],
    ] {
        let err = io::write_png(&p, &Tensor::zeros(&shape)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("{shape:?}")) && msg.contains("(1, 3, H, W)"),
            "{msg}"
        );
        assert!(io::write_tiff_f32(&p, &Tensor::zeros(&shape)).is_err());
    }
    assert!(!p.exists(), "a rejected write must not create the file");
}

#[test]
fn corrupt_truncated_and_empty_images_name_the_file() {
    let dir = tmp();
    let good_png = dir.path().join("good.png");
    io::write_png(&good_png, &ramp(&[1, 3, 32, 32], 4)).unwrap();
    let good_tif = dir.path().join("good.tif");
    io::write_tiff_f32(&good_tif, &ramp(&[1, 1, 32, 32], 4)).unwrap();

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty.png", vec![]),
        ("garbage.png", b"this is not an image at all".to_vec()),
        ("half.png", {
            let b = std::fs::read(&good_png).unwrap();
            b[..b.len() / 2].to_vec()
        }),
        ("head.tif", std::fs::read(&good_tif).unwrap()[..40].to_vec()),
        ("half.tif", {
            let b = std::fs::read(&good_tif).unwrap();
            b[..b.len() / 2].to_vec()
        }),
        (
            "head.jpg",
            vec![0xFF, 0xD8, 0xFF, 0xE0, 0, 16, b'J', b'F', b'I', b'F'],
        ),
    ];
    for (name, bytes) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let err = io::read_image(&p).expect_err(name);
        assert_format_error_names(err, &p);
        assert!(io::read_array(&p).is_err());
    }
}

#[test]
fn missing_image_is_an_io_error() {
    let p = PathBuf::from("/nonexistent/dir/none.png");
    assert!(matches!(io::read_image(&p), Err(Error::Io { .. })));
    assert!(matches!(io::read_array(&p), Err(Error::Io { .. })));
}

// ------------------------------------------------------------------------------------------------
// NIfTI
// ------------------------------------------------------------------------------------------------

/// A NIfTI-1 header, written field by field from nifti1.h, for hand-made test files.
struct Hdr {
    be: bool,
    dim: [i16; 8],
    datatype: i16,
    bitpix: i16,
    vox_offset: f32,
    slope: f32,
    inter: f32,
}

impl Hdr {
    fn new(dims: &[i16], datatype: i16, bitpix: i16) -> Hdr {
        let mut dim = [1i16; 8];
        dim[0] = dims.len() as i16;
        dim[1..=dims.len()].copy_from_slice(dims);
        Hdr {
            be: false,
            dim,
            datatype,
            bitpix,
            vox_offset: 352.0,
            slope: 0.0,
            inter: 0.0,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut h = vec![0u8; 352];
        let i32b = |v: i32| {
            if self.be {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let i16b = |v: i16| {
            if self.be {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let f32b = |v: f32| {
            if self.be {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        h[0..4].copy_from_slice(&i32b(348));
        for (i, d) in self.dim.iter().enumerate() {
            h[40 + 2 * i..42 + 2 * i].copy_from_slice(&i16b(*d));
        }
        h[70..72].copy_from_slice(&i16b(self.datatype));
        h[72..74].copy_from_slice(&i16b(self.bitpix));
        h[108..112].copy_from_slice(&f32b(self.vox_offset));
        h[112..116].copy_from_slice(&f32b(self.slope));
        h[116..120].copy_from_slice(&f32b(self.inter));
        h[344..348].copy_from_slice(b"n+1\0");
        h
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

#[test]
fn nifti_round_trip_plain_and_gzip() {
    let dir = tmp();
    let t = ramp(&[1, 1, 5, 6, 7], 5);
    for name in ["v.nii", "v.nii.gz", "V.NII.GZ"] {
        let p = dir.path().join(name);
        io::write_nifti(&p, &t).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(
            bytes.starts_with(&[0x1F, 0x8B]),
            name.to_lowercase().ends_with(".gz")
        );
        assert_eq!(io::read_nifti(&p).unwrap(), t, "{name}");
        assert_eq!(io::read_array(&p).unwrap(), t, "{name}");
    }
    // (D, H, W) is written as the same 3-D volume.
    let p = dir.path().join("dhw.nii");
    io::write_nifti(&p, &t.clone().reshape(&[5, 6, 7]).unwrap()).unwrap();
    assert_eq!(io::read_nifti(&p).unwrap(), t);
}

#[test]
fn nifti_2d_and_4d_round_trip() {
    let dir = tmp();
    let img = ramp(&[1, 1, 9, 4], 6);
    let p = dir.path().join("img.nii");
    io::write_nifti(&p, &img).unwrap();
    assert_eq!(io::read_nifti(&p).unwrap(), img);

    let series = ramp(&[1, 3, 2, 4, 5], 7);
    let p = dir.path().join("series.nii.gz");
    io::write_nifti(&p, &series).unwrap();
    assert_eq!(io::read_nifti(&p).unwrap(), series);

    let err = io::write_nifti(&p, &Tensor::zeros(&[2, 1, 2, 2, 2])).unwrap_err();
    assert!(err.to_string().contains("[2, 1, 2, 2, 2]"), "{err}");
}

#[test]
fn nifti_axis_mapping_big_endian_int16_with_scaling() {
    // dim = [3, X=4, Y=3, Z=2], stored x-fastest; voxel (x, y, z) holds x + 10y + 100z.
    let dir = tmp();
    let mut hdr = Hdr::new(&[4, 3, 2], 4, 16);
    hdr.be = true;
    hdr.slope = 0.5;
    hdr.inter = 1.0;
    let mut bytes = hdr.bytes();
    for z in 0..2i16 {
        for y in 0..3i16 {
            for x in 0..4i16 {
                bytes.extend_from_slice(&(x + 10 * y + 100 * z).to_be_bytes());
            }
        }
    }
    let p = dir.path().join("be.nii");
    std::fs::write(&p, &bytes).unwrap();
    let t = io::read_nifti(&p).unwrap();
    assert_eq!(t.shape(), &[1, 1, 2, 3, 4], "(1, 1, D=Z, H=Y, W=X)");
    for z in 0..2 {
        for y in 0..3 {
            for x in 0..4 {
                let v = t.data()[(z * 3 + y) * 4 + x];
                assert_eq!(v, (x + 10 * y + 100 * z) as f32 * 0.5 + 1.0);
            }
        }
    }
}

#[test]
fn nifti_reads_uint8_and_float64_little_endian() {
    let dir = tmp();
    let mut bytes = Hdr::new(&[3, 2, 2], 2, 8).bytes();
    bytes.extend((0u8..12).map(|v| v * 20));
    let p = dir.path().join("u8.nii");
    std::fs::write(&p, &bytes).unwrap();
    let t = io::read_nifti(&p).unwrap();
    assert_eq!(
        t.data(),
        &(0..12).map(|v| (v * 20) as f32).collect::<Vec<_>>()[..]
    );

    let mut bytes = Hdr::new(&[2, 2, 2], 64, 64).bytes();
    for v in 0..8 {
        bytes.extend_from_slice(&(v as f64 * -1.25).to_le_bytes());
    }
    let p = dir.path().join("f64.nii.gz");
    std::fs::write(&p, gzip(&bytes)).unwrap();
    let t = io::read_nifti(&p).unwrap();
    assert_eq!(t.shape(), &[1, 1, 2, 2, 2]);
    assert_eq!(t.data()[7], -8.75);
}

#[test]
fn nifti_header_lying_about_its_size_is_rejected_without_allocating() {
    // 32767³ float32 voxels would be 140 TB: were the reader to allocate before checking, the test
    // process would abort instead of getting an error.
    let dir = tmp();
    let mut bytes = Hdr::new(&[32767, 32767, 32767], 16, 32).bytes();
    bytes.extend_from_slice(&[0u8; 64]);
    let p = dir.path().join("liar.nii");
    std::fs::write(&p, &bytes).unwrap();
    let err = io::read_nifti(&p).unwrap_err();
    assert!(err.to_string().contains("claims"), "{err}");
    assert_format_error_names(err, &p);

    let p = dir.path().join("liar.nii.gz");
    std::fs::write(&p, gzip(&bytes)).unwrap();
    assert_format_error_names(io::read_nifti(&p).unwrap_err(), &p);

    // Seven axes of 32767: the byte count overflows usize.
    let mut bytes = Hdr::new(&[32767; 7], 16, 32).bytes();
    bytes.extend_from_slice(&[0u8; 64]);
    let p = dir.path().join("overflow.nii");
    std::fs::write(&p, &bytes).unwrap();
    assert_format_error_names(io::read_nifti(&p).unwrap_err(), &p);
}

#[test]
fn corrupt_nifti_files_are_format_errors_naming_the_file() {
    let dir = tmp();
    let good = dir.path().join("good.nii");
    io::write_nifti(&good, &ramp(&[1, 1, 3, 4, 5], 8)).unwrap();
    let good_bytes = std::fs::read(&good).unwrap();
    let good_gz = gzip(&good_bytes);

    let mut complex = Hdr::new(&[2, 2, 2], 32, 64).bytes();
    complex.extend_from_slice(&[0u8; 64]);
    let mut bad_bitpix = Hdr::new(&[2, 2, 2], 16, 8).bytes();
    bad_bitpix.extend_from_slice(&[0u8; 32]);
    let mut negative_dim = Hdr::new(&[2, -2, 2], 16, 32).bytes();
    negative_dim.extend_from_slice(&[0u8; 32]);
    let mut nifti2 = good_bytes.clone();
    nifti2[0..4].copy_from_slice(&540i32.to_le_bytes());

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.nii", vec![], "empty"),
        ("short.nii", good_bytes[..100].to_vec(), "too short"),
        (
            "truncated.nii",
            good_bytes[..good_bytes.len() - 4].to_vec(),
            "claims",
        ),
        (
            "truncated.nii.gz",
            good_gz[..good_gz.len() / 2].to_vec(),
            "",
        ),
        ("complex.nii", complex, "datatype code 32"),
        ("bitpix.nii", bad_bitpix, "bitpix"),
        ("negative.nii", negative_dim, "dim[2]"),
        ("nifti2.nii", nifti2, "NIfTI-2"),
        ("text.nii", vec![b'x'; 400], "sizeof_hdr"),
    ];
    for (name, bytes, needle) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let err = io::read_nifti(&p).expect_err(name);
        assert!(err.to_string().contains(needle), "{name}: {err}");
        assert_format_error_names(err, &p);
    }
    let missing = dir.path().join("missing.nii.gz");
    assert!(matches!(io::read_nifti(&missing), Err(Error::Io { .. })));
}

// ------------------------------------------------------------------------------------------------
// Dispatch
// ------------------------------------------------------------------------------------------------

#[test]
fn read_write_array_dispatch_by_extension() {
    let dir = tmp();
    let img = Tensor::from_fn(&[1, 3, 6, 5], |i| (i % 256) as f32 / 255.0);
    let vol = ramp(&[1, 1, 3, 4, 5], 9);
    let gray = vol.clone().reshape(&[1, 1, 12, 5]).unwrap();
    let cases: Vec<(&str, &Tensor)> = vec![
        ("a.npy", &vol),
        ("a.png", &img),
        ("a.PNG", &img),
        ("a.tif", &img),
        ("a.tiff", &gray),
        ("a.nii", &vol),
        ("a.nii.gz", &vol),
    ];
    for (name, t) in cases {
        let p = dir.path().join(name);
        io::write_array(&p, t).unwrap();
        assert_eq!(&io::read_array(&p).unwrap(), t, "{name}");
    }
    assert_eq!(
        FileKind::from_path(Path::new("x/y.Nii.Gz")),
        Some(FileKind::Nifti)
    );
    assert_eq!(
        FileKind::from_path(Path::new("scan.JPEG")),
        Some(FileKind::Jpeg)
    );
    assert_eq!(FileKind::from_path(Path::new("archive.tar.gz")), None);
    assert_eq!(FileKind::from_path(Path::new("noext")), None);

    let unknown = dir.path().join("a.bmp");
    std::fs::write(&unknown, b"BM").unwrap();
    let msg = io::read_array(&unknown).unwrap_err().to_string();
    assert!(
        msg.contains(".npy") && msg.contains(".nii.gz") && msg.contains("a.bmp"),
        "{msg}"
    );
    let msg = io::write_array(&unknown, &img).unwrap_err().to_string();
    assert!(msg.contains(".tif") && msg.contains("a.bmp"), "{msg}");
    let jpg = dir.path().join("a.jpg");
    assert!(io::write_array(&jpg, &img).is_err());
    assert!(!jpg.exists());
}

// ------------------------------------------------------------------------------------------------
// Samples
// ------------------------------------------------------------------------------------------------

fn in_unit_range(t: &Tensor) -> bool {
    t.data().iter().all(|v| (0.0..=1.0).contains(v))
}

#[test]
fn shepp_logan_values_orientation_and_symmetry() {
    let n = 129; // odd: a pixel sits exactly at the centre (0, 0)
    let p = samples::shepp_logan(n);
    assert_eq!(p.shape(), &[1, 1, n, n]);
    assert!(in_unit_range(&p));
    assert_eq!(p, samples::shepp_logan(n));
    let at = |row: usize, col: usize| p.data()[row * n + col];
    assert_eq!(at(0, 0), 0.0, "outside the head");
    assert_eq!(at(64, 64), 0.2, "brain matter at the centre: 1 − 0.8");
    assert_eq!(at(64, 2), 0.0);
    // Skull (value 1) at the top edge of the outer ellipse, y = 0.92 → row ≈ 64·(1 − 0.9)
    assert_eq!(at(7, 64), 1.0);
    // Dark ventricles (1 − 0.8 − 0.2 = 0) at x = ±0.22.
    assert!(at(64, 64 + 14) < 1e-6 && at(64, 64 - 14) < 1e-6);
    // The bright ellipse at y = +0.35 is above the centre (row 0 is the top, y = +1).
    assert!((at(64 - 22, 64) - 0.3).abs() < 1e-6);
    // The phantom is mirror-symmetric left–right except for the two ventricles (ellipses 3 and 4 differ
    // in size, |y| < 0.42) and the three small ellipses near y = −0.605; rows elsewhere match exactly.
    let y_of = |r: usize| 1.0 - r as f64 / 64.0;
    for r in (0..n).filter(|&r| y_of(r).abs() > 0.42 && y_of(r) > -0.55) {
        for c in 0..n {
            assert_eq!(at(r, c), at(r, n - 1 - c), "row {r} col {c}");
        }
    }
    // The larger ventricle (ellipse 4, x0 = −0.22) is on the image's left.
    let dark = |cols: std::ops::Range<usize>| {
        (32..96)
            .flat_map(|r| cols.clone().map(move |c| (r, c)))
            .filter(|&(r, c)| at(r, c) == 0.0)
            .count()
    };
    assert!(
        dark(20..64) > dark(65..109) + 50,
        "{} vs {}",
        dark(20..64),
        dark(65..109)
    );
    let values: std::collections::BTreeSet<u32> =
        p.data().iter().map(|v| (v * 10.0).round() as u32).collect();
    assert_eq!(
        values.into_iter().collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4, 10]
    );
}

#[test]
fn shepp_logan_3d_is_in_range_and_symmetric() {
    let n = 65;
    let v = samples::shepp_logan_3d(n);
    assert_eq!(v.shape(), &[1, 1, n, n, n]);
    assert!(in_unit_range(&v));
    assert_eq!(v, samples::shepp_logan_3d(n));
    let at = |d: usize, h: usize, w: usize| v.data()[(d * n + h) * n + w];
    assert_eq!(at(32, 32, 32), 0.2);
    assert_eq!(
        at(0, 32, 32),
        0.0,
        "z = −1 lies outside the skull (c = 0.81)"
    );
    let y_of = |h: usize| 1.0 - h as f64 / 32.0;
    for d in 0..n {
        for h in (0..n).filter(|&h| y_of(h).abs() > 0.42 && y_of(h) > -0.55) {
            for w in 0..n {
                assert_eq!(at(d, h, w), at(d, h, n - 1 - w), "({d}, {h}, {w})");
            }
        }
    }
    // The central slice cuts ellipsoids 1 and 2 (centred at z = 0) through their middle: its skull is
    // the 2-D phantom's skull, pixel for pixel.
    let flat = samples::shepp_logan(n);
    let central = &v.data()[32 * n * n..33 * n * n];
    let skull = |t: &[f32]| t.iter().map(|&x| x == 1.0).collect::<Vec<_>>();
    assert_eq!(skull(central), skull(flat.data()));
    assert!(skull(central).iter().filter(|&&b| b).count() > 50);
}

#[test]
fn generate_validates_sizes_and_parses_names() {
    assert_eq!(
        samples::generate(Sample::SheppLogan, &[64], 0)
            .unwrap()
            .shape(),
        &[1, 1, 64, 64]
    );
    assert_eq!(
        samples::generate(Sample::SheppLogan3d, &[16, 16, 16], 0)
            .unwrap()
            .shape(),
        &[1, 1, 16, 16, 16]
    );
    assert_eq!(
        samples::generate(Sample::Natural, &[24, 40], 3)
            .unwrap()
            .shape(),
        &[1, 3, 24, 40]
    );
    assert_eq!(
        samples::generate(Sample::Natural, &[20], 3)
            .unwrap()
            .shape(),
        &[1, 3, 20, 20]
    );
    for (sample, size) in [
        (Sample::SheppLogan, vec![4]),
        (Sample::SheppLogan, vec![64, 32]),
        (Sample::SheppLogan, vec![]),
        (Sample::Natural, vec![20_000, 20]),
        (Sample::Natural, vec![16, 16, 16]),
        (Sample::SheppLogan3d, vec![16384]),
    ] {
        let err = samples::generate(sample, &size, 0).unwrap_err();
        assert!(
            matches!(err, Error::InvalidConfig { ref field, .. } if field == "image.size"),
            "{err}"
        );
    }
    let names: Vec<Sample> =
        serde_json::from_str(r#"["shepp_logan", "shepp_logan_3d", "natural"]"#).unwrap();
    assert_eq!(
        names,
        vec![Sample::SheppLogan, Sample::SheppLogan3d, Sample::Natural]
    );
    assert_eq!(
        serde_json::to_string(&Sample::SheppLogan3d).unwrap(),
        r#""shepp_logan_3d""#
    );
    assert!(serde_json::from_str::<Sample>(r#""shepp-logan""#).is_err());
}

#[test]
fn natural_image_is_deterministic_coloured_and_in_range() {
    let a = samples::natural_image(96, 131, 42);
    assert_eq!(a.shape(), &[1, 3, 96, 131]);
    assert!(in_unit_range(&a));
    assert_eq!(a, samples::natural_image(96, 131, 42));
    let b = samples::natural_image(96, 131, 43);
    assert!(
        a.max_abs_diff(&b) > 0.3,
        "different seeds give different images"
    );
    // Colour: the channels are not copies of each other.
    let plane = 96 * 131;
    let d = &a.data();
    let rg: f32 = (0..plane).map(|i| (d[i] - d[plane + i]).abs()).sum::<f32>() / plane as f32;
    assert!(rg > 0.02, "mean |R − G| = {rg}");
    // Not a flat image: a healthy spread of values.
    let mean = d.iter().sum::<f32>() / d.len() as f32;
    let std = (d.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / d.len() as f32).sqrt();
    assert!(std > 0.08, "std {std}");
    // Tiny and odd sizes work.
    assert!(in_unit_range(&samples::natural_image(8, 9, 0)));
}

/// Gray version of a (1, 3, H, W) image.
fn luminance(t: &Tensor) -> Vec<f64> {
    let n = t.plane_len();
    (0..n)
        .map(|i| (0..3).map(|c| t.data()[c * n + i] as f64).sum::<f64>() / 3.0)
        .collect()
}

#[test]
fn natural_image_has_sharp_edges() {
    for seed in [7, 8, 9] {
        edge_statistics(seed);
    }
}

fn edge_statistics(seed: u64) {
    let (h, w) = (256, 256);
    let g = luminance(&samples::natural_image(h, w, seed));
    let mut grads = Vec::new();
    for y in 0..h - 1 {
        for x in 0..w - 1 {
            let gx = g[y * w + x + 1] - g[y * w + x];
            let gy = g[(y + 1) * w + x] - g[y * w + x];
            grads.push((gx * gx + gy * gy).sqrt());
        }
    }
    let strong = grads.iter().filter(|&&v| v > 0.1).count() as f64 / grads.len() as f64;
    let weak = grads.iter().filter(|&&v| v < 0.02).count() as f64 / grads.len() as f64;
    println!("seed {seed}: strong {strong:.3}, smooth {weak:.3}");
    // Natural-image gradients are sparse: mostly smooth, with a few percent of strong edges.
    assert!(
        strong > 0.01 && strong < 0.3,
        "strong-edge fraction {strong}"
    );
    assert!(weak > 0.3, "smooth fraction {weak}");
}

#[test]
fn natural_image_spectrum_is_roughly_power_law() {
    for seed in [11, 12, 13] {
        spectral_slope(seed);
    }
}

fn spectral_slope(seed: u64) {
    use rustfft::{FftPlanner, num_complex::Complex};
    let n = 256;
    let g = luminance(&samples::natural_image(n, n, seed));
    let mean = g.iter().sum::<f64>() / g.len() as f64;
    let mut buf: Vec<Complex<f64>> = g.iter().map(|&v| Complex::new(v - mean, 0.0)).collect();
    let fft = FftPlanner::new().plan_fft_forward(n);
    for row in buf.chunks_exact_mut(n) {
        fft.process(row);
    }
    let mut col = vec![Complex::new(0.0, 0.0); n];
    for x in 0..n {
        for y in 0..n {
            col[y] = buf[y * n + x];
        }
        fft.process(&mut col);
        for y in 0..n {
            buf[y * n + x] = col[y];
        }
    }
    // Radially averaged power in integer frequency bins, then a least-squares slope in log–log.
    let mut power = vec![(0.0f64, 0usize); n / 2];
    for ky in 0..n {
        for kx in 0..n {
            let fy = if ky <= n / 2 {
                ky as f64
            } else {
                ky as f64 - n as f64
            };
            let fx = if kx <= n / 2 {
                kx as f64
            } else {
                kx as f64 - n as f64
            };
            let r = (fx * fx + fy * fy).sqrt().round() as usize;
            if r < n / 2 {
                power[r].0 += buf[ky * n + kx].norm_sqr();
                power[r].1 += 1;
            }
        }
    }
    let pts: Vec<(f64, f64)> = (4..n / 2 - 8)
        .map(|r| ((r as f64).ln(), (power[r].0 / power[r].1 as f64).ln()))
        .collect();
    let m = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |(a, b), p| (a + p.0, b + p.1));
    let (mx, my) = (sx / m, sy / m);
    let cov: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let var: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let slope = cov / var;
    let resid: f64 = pts
        .iter()
        .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
        .sum::<f64>()
        / m;
    println!(
        "seed {seed}: slope {slope:.3}, rms residual {:.3}",
        resid.sqrt()
    );
    // Natural images: power ∝ 1/f^α with α ≈ 2 (Field 1987; van der Schaaf & van Hateren 1996).
    assert!((-3.0..=-1.5).contains(&slope), "spectral slope {slope}");
    // And the fit is good: residuals are small compared with the range covered.
    assert!(resid.sqrt() < 0.5, "rms residual {resid}");
}

/// `cargo test --release --test io -- --ignored --nocapture natural_image_timing`
#[test]
#[ignore]
fn natural_image_timing() {
    for (h, w) in [(512, 512), (2048, 2048), (4096, 4096)] {
        let _ = samples::natural_image(64, 64, 0);
        let t0 = std::time::Instant::now();
        let img = samples::natural_image(h, w, 1);
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "natural_image {h}x{w}: {:.3} s ({} threads)",
            secs,
            rayon::current_num_threads()
        );
        assert_eq!(img.shape(), &[1, 3, h, w]);
    }
    let t0 = std::time::Instant::now();
    let _ = samples::shepp_logan_3d(256);
    println!("shepp_logan_3d 256^3: {:.3} s", t0.elapsed().as_secs_f64());
}

// ------------------------------------------------------------------------------------------------
// Metrics
// ------------------------------------------------------------------------------------------------

#[test]
fn psnr_of_a_constant_offset() {
    let x = ramp(&[1, 3, 16, 16], 12);
    let mut y = x.clone();
    y.map_inplace(|v| v + 0.1);
    // MSE = 0.01 → PSNR = 10 log10(1 / 0.01) = 20 dB; with a range of 2, 20 + 20 log10(2).
    assert!((mse(&y, &x).unwrap() - 0.01).abs() < 1e-8);
    assert!((psnr(&y, &x, 1.0).unwrap() - 20.0).abs() < 1e-5);
    assert!((psnr(&y, &x, 2.0).unwrap() - (20.0 + 20.0 * 2f64.log10())).abs() < 1e-5);
    assert_eq!(psnr(&x, &x, 1.0).unwrap(), f64::INFINITY);
}

#[test]
fn psnr_averages_per_item_over_the_batch() {
    // Item 0 off by 0.1 (20 dB), item 1 off by 0.01 (40 dB): deepinv's per-item mean is 30 dB,
    // whereas a global MSE would give 10 log10(1 / 0.00505) ≈ 22.97 dB.
    let x = Tensor::zeros(&[2, 1, 8, 8]);
    let mut y = x.clone();
    y.data_mut()[..64].iter_mut().for_each(|v| *v = 0.1);
    y.data_mut()[64..].iter_mut().for_each(|v| *v = 0.01);
    assert!((psnr(&y, &x, 1.0).unwrap() - 30.0).abs() < 1e-4);
}

#[test]
fn metrics_reject_bad_inputs() {
    let a = Tensor::zeros(&[1, 1, 16, 16]);
    let b = Tensor::zeros(&[1, 1, 16, 15]);
    assert!(matches!(
        psnr(&a, &b, 1.0),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ssim(&a, &b, 1.0),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(mse(&a, &b), Err(Error::ShapeMismatch { .. })));
    assert!(psnr(&a, &a, 0.0).is_err());
    assert!(ssim(&a, &a, f32::NAN).is_err());
    let small = Tensor::zeros(&[1, 1, 10, 40]);
    assert!(
        ssim(&small, &small, 1.0)
            .unwrap_err()
            .to_string()
            .contains("11")
    );
}

/// SSIM computed the slow, obvious way: a 2-D Gaussian window at every valid position.
fn naive_ssim(x: &[f32], y: &[f32], h: usize, w: usize, range: f64) -> f64 {
    let g: Vec<f64> = (-5..=5)
        .map(|t: i32| (-(t * t) as f64 / 4.5).exp())
        .collect();
    let s: f64 = g.iter().sum();
    let g: Vec<f64> = g.iter().map(|v| v / s).collect();
    let (c1, c2) = ((0.01 * range).powi(2), (0.03 * range).powi(2));
    let mut total = 0.0;
    for i in 0..=h - 11 {
        for j in 0..=w - 11 {
            let (mut mx, mut my, mut mxx, mut myy, mut mxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for k in 0..11 {
                for l in 0..11 {
                    let wt = g[k] * g[l];
                    let (a, b) = (x[(i + k) * w + j + l] as f64, y[(i + k) * w + j + l] as f64);
                    mx += wt * a;
                    my += wt * b;
                    mxx += wt * a * a;
                    myy += wt * b * b;
                    mxy += wt * a * b;
                }
            }
            let (vx, vy, vxy) = (mxx - mx * mx, myy - my * my, mxy - mx * my);
            total += (2.0 * mx * my + c1) * (2.0 * vxy + c2)
                / ((mx * mx + my * my + c1) * (vx + vy + c2));
        }
    }
    total / ((h - 10) * (w - 10)) as f64
}

#[test]
fn ssim_matches_a_naive_implementation() {
    // 150 rows: more than one 64-row band, so band seams are exercised.
    let (h, w) = (150, 23);
    let x = ramp(&[1, 1, h, w], 13);
    let mut y = ramp(&[1, 1, h, w], 14);
    y.axpy(1.0, &x); // correlated with x
    y.scale(0.5);
    for range in [1.0f32, 2.5] {
        let want = naive_ssim(x.data(), y.data(), h, w, range as f64);
        let got = ssim(&y, &x, range).unwrap();
        assert!((got - want).abs() < 1e-10, "{got} vs {want}");
    }
}

#[test]
fn ssim_is_one_for_identical_images_and_falls_with_noise() {
    let x = samples::natural_image(64, 64, 5);
    assert!((ssim(&x, &x, 1.0).unwrap() - 1.0).abs() < 1e-12);
    let noisy = |sigma: f32| {
        let mut y = x.clone();
        let n = ramp(x.shape(), 99);
        y.axpy(sigma * 3.4, &n); // uniform [0,1) ⋅ 3.4 ≈ std 1 (plus an offset)
        y.axpy(-sigma * 1.7, &Tensor::full(x.shape(), 1.0));
        y
    };
    let s1 = ssim(&noisy(0.02), &x, 1.0).unwrap();
    let s2 = ssim(&noisy(0.1), &x, 1.0).unwrap();
    let s3 = ssim(&noisy(0.3), &x, 1.0).unwrap();
    assert!(1.0 > s1 && s1 > s2 && s2 > s3 && s3 > 0.0, "{s1} {s2} {s3}");
}

#[test]
fn ssim_of_an_offset_is_the_luminance_term() {
    // y = x + δ: the variances and covariance are equal, so SSIM = mean (2 μx μy + C1)/(μx² + μy² + C1).
    // For constant x = 0.3, δ = 0.2: (2·0.3·0.5 + C1)/(0.09 + 0.25 + C1).
    let x = Tensor::full(&[1, 1, 20, 20], 0.3);
    let y = Tensor::full(&[1, 1, 20, 20], 0.5);
    let c1 = 1e-4;
    let want = (0.3 + c1) / (0.34 + c1);
    assert!((ssim(&y, &x, 1.0).unwrap() - want).abs() < 1e-7);
}

#[test]
fn ssim_of_a_volume_is_the_mean_over_slices() {
    let (d, h, w) = (3, 16, 18);
    let x = ramp(&[1, 1, d, h, w], 21);
    let mut y = x.clone();
    let plane = h * w;
    // Different damage per slice.
    for (k, s) in y.data_mut().chunks_exact_mut(plane).enumerate() {
        s.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v += (k as f32 + 1.0) * 0.05 * ((i % 7) as f32 - 3.0));
    }
    let per_slice: f64 = (0..d)
        .map(|k| {
            let xs = Tensor::from_vec(&[1, 1, h, w], x.data()[k * plane..(k + 1) * plane].to_vec())
                .unwrap();
            let ys = Tensor::from_vec(&[1, 1, h, w], y.data()[k * plane..(k + 1) * plane].to_vec())
                .unwrap();
            ssim(&ys, &xs, 1.0).unwrap()
        })
        .sum::<f64>()
        / d as f64;
    assert!((ssim(&y, &x, 1.0).unwrap() - per_slice).abs() < 1e-12);
}

/// SEG-Y files written by segyio (IBM and IEEE float; `scripts/make_fwi_fixtures.py`) read back to the
/// values segyio itself reads, with their trace headers.
#[test]
fn segy_written_by_segyio_reads_back() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fwi");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("segy_manifest.json")).unwrap())
            .unwrap();
    for name in ["segyio_ibm", "segyio_ieee"] {
        let m = &manifest[name];
        let s = tessera::io::read_segy(&dir.join(format!("{name}.sgy"))).unwrap();
        let (shape, want) = tessera::io::read_npy_f64(&dir.join(format!("{name}.npy"))).unwrap();
        assert_eq!(vec![s.traces(), s.samples], shape);
        assert_eq!(s.dt_us as u64, m["dt_us"].as_u64().unwrap());
        for (a, b) in s.data.iter().zip(&want) {
            assert_eq!(*a as f64, *b, "{name}");
        }
        let ffid: Vec<i32> = m["ffid"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap() as i32)
            .collect();
        let tn: Vec<i32> = m["trace_number"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap() as i32)
            .collect();
        assert_eq!(s.ffid, ffid);
        assert_eq!(s.trace_number, tn);
    }
}
