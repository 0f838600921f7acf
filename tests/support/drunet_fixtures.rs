//! The DRUNet fixtures in tests/fixtures/deepinv (deepinv 0.5.0, seeded random weights; their
//! architectures as in `manifest.json`), shared by the native and libtorch parity tests.

#![allow(dead_code)]

use tessera::nn::DrunetArch;

/// (fixture name, architecture) of every DRUNet fixture.
pub fn cases() -> Vec<(&'static str, DrunetArch)> {
    let gray = |dim| DrunetArch {
        in_channels: 1,
        out_channels: 1,
        nc: [8, 16, 32, 64],
        nb: 1,
        dim,
    };
    vec![
        (
            "drunet2d_color",
            DrunetArch {
                in_channels: 3,
                out_channels: 3,
                nc: [16, 32, 64, 128],
                nb: 2,
                dim: 2,
            },
        ),
        ("drunet2d_gray", gray(2)),
        // 16×24×32: below 32 on one axis, so deepinv replicate-pads to multiples of 16 and crops.
        ("drunet3d_gray", gray(3)),
    ]
}

/// The architecture of fixture `name`.
pub fn arch_of(name: &str) -> DrunetArch {
    cases()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no DRUNet fixture {name}"))
        .1
}
