//! The denoisers tessera ships (assets/weights, embedded in the binary) denoise: on a held-out
//! generated image and on a real photograph (tests/fixtures/photos), grey and colour, the bundled
//! DnCNN gains at least `MARGIN_DB` over the noisy input at σ = 0.1 — which random weights of the
//! same network do not — and a preset's DnCNN of the bundled architecture without `weights` runs
//! them; and the rule for PnP's step and denoiser noise level (docs/PNP.md) the presets follow.

use std::path::Path;

use tessera::Tensor;
use tessera::denoise::DenoiserConfig;
use tessera::metrics::psnr;
use tessera::nn::DncnnConfig;
use tessera::optim::AlgorithmConfig;
use tessera::optim::pnp::rule_denoiser_sigma;
use tessera::physics::stack::{Stack, StackedLinearPhysics};
use tessera::preset::Preset;
use tessera::train::eval::add_noise;

/// Measured gains at σ = 0.1 on these 128² crops: 7.4 dB (grey generated), 6.2 dB (colour
/// generated), 8.1 dB (camera crop), 7.7 dB (astronaut crop) (assets/weights/README.md); random
/// weights lose PSNR. The margin leaves room for rounding differences across machines, not for a
/// network that does not denoise.
const MARGIN_DB: f64 = 4.0;
const SIGMA: f32 = 0.1;

fn held_out_generated(grey: bool) -> Tensor {
    // The held-out image of presets/train-dncnn-{grey,colour}.toml (seed 1000, never trained on),
    // cropped to 128² to keep the test fast.
    let x = tessera::samples::natural_image(256, 256, 1000);
    let c = if grey { 1 } else { 3 };
    Tensor::from_fn(&[1, c, 128, 128], |i| {
        let (ch, y, xx) = (i / (128 * 128), (i / 128) % 128, i % 128);
        let at = |k: usize| x.data()[(k * 256 + 64 + y) * 256 + 64 + xx];
        if grey {
            (at(0) + at(1) + at(2)) / 3.0
        } else {
            at(ch)
        }
    })
}

fn photo(name: &str) -> Tensor {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/photos")
        .join(name);
    // PNGs read as (1, C, H, W).
    tessera::io::read_array(&path).unwrap()
}

/// PSNR gain of `cfg` over the noisy input on `clean` at σ.
fn gain(cfg: &DenoiserConfig, clean: &Tensor) -> f64 {
    let noisy = add_noise(clean, SIGMA, 7);
    let out = cfg.build().unwrap().denoise(&noisy, SIGMA).unwrap();
    psnr(&out, clean, 1.0).unwrap() - psnr(&noisy, clean, 1.0).unwrap()
}

fn random(channels: usize) -> DenoiserConfig {
    DenoiserConfig::Dncnn(DncnnConfig {
        weights: Some("random".into()),
        ..DncnnConfig::bundled(channels)
    })
}

#[test]
fn the_bundled_denoisers_beat_the_noisy_input_on_held_out_images_and_real_photos_and_random_weights_do_not()
 {
    let images = [
        ("generated grey", held_out_generated(true)),
        ("generated colour", held_out_generated(false)),
        ("camera crop (grey photo)", photo("camera_128.png")),
        ("astronaut crop (colour photo)", photo("astronaut_128.png")),
    ];
    for (what, clean) in images {
        let channels = clean.shape()[1];
        assert_eq!(clean.shape(), &[1, channels, 128, 128], "{what}");
        let bundled = DenoiserConfig::Dncnn(DncnnConfig::bundled(channels));
        let g = gain(&bundled, &clean);
        assert!(
            g >= MARGIN_DB,
            "{what}: the bundled DnCNN gains only {g:.2} dB"
        );
        let r = gain(&random(channels), &clean);
        assert!(r < MARGIN_DB, "{what}: random weights gain {r:.2} dB");
    }
}

#[test]
fn a_preset_dncnn_without_weights_runs_the_bundled_ones_and_random_must_be_asked_for() {
    let parse = |text: &str| -> DenoiserConfig { toml::from_str(text).unwrap() };
    let clean = held_out_generated(true);
    let noisy = add_noise(&clean, SIGMA, 3);
    let run = |cfg: &DenoiserConfig| cfg.build().unwrap().denoise(&noisy, SIGMA).unwrap();
    let plain = "kind = \"dncnn\"\nin_channels = 1\nout_channels = 1\ndepth = 8\nnf = 32";
    let default = run(&parse(plain));
    let named = run(&parse(&format!("{plain}\nweights = \"bundled\"")));
    assert_eq!(default, named, "no weights = the bundled ones");
    let random = run(&parse(&format!("{plain}\nweights = \"random\"")));
    assert!(random.max_abs_diff(&default) > 0.01);
    // A bundled name is not a file to resolve against the preset's folder.
    let mut cfg = parse(&format!("{plain}\nweights = \"random\""));
    assert_eq!(cfg.paths_mut().count(), 0);
    // "bundled" where nothing is bundled is an error naming the field.
    let deeper = parse(
        "kind = \"dncnn\"\nin_channels = 1\nout_channels = 1\ndepth = 9\nnf = 32\nweights = \"bundled\"",
    );
    let err = deeper.build().err().unwrap().to_string();
    assert!(
        err.contains("denoiser.weights") && err.contains("no bundled"),
        "{err}"
    );
    // deepinv's default DRUNet (nc 64…512, colour) is not the bundled one: the error says what is.
    let drunet = parse("kind = \"drunet\"\nweights = \"bundled\"");
    let err = drunet.validate().unwrap_err().to_string();
    assert!(
        err.contains("no bundled DRUNet") && err.contains("opponent_colour"),
        "{err}"
    );
    // The bundled one, by its architecture, on grey images and (opponent colour) on colour ones;
    // with no weights it is the bundled one too.
    let bundled =
        "kind = \"drunet\"\nin_channels = 1\nout_channels = 1\nnc = [16, 32, 64, 128]\nnb = 2";
    let grey = run(&parse(&format!("{bundled}\nweights = \"bundled\"")));
    assert_eq!(grey, run(&parse(bundled)), "no weights = the bundled ones");
    let colour = parse(&format!("{bundled}\nopponent_colour = true"));
    let clean = held_out_generated(false);
    let noisy = add_noise(&clean, SIGMA, 3);
    let out = colour.build().unwrap().denoise(&noisy, SIGMA).unwrap();
    assert!(psnr(&out, &clean, 1.0).unwrap() > psnr(&noisy, &clean, 1.0).unwrap() + MARGIN_DB);
    // opponent_colour is for a one-channel network.
    let err = parse("kind = \"drunet\"\nopponent_colour = true")
        .validate()
        .unwrap_err();
    assert!(
        err.to_string().contains("denoiser.opponent_colour"),
        "{err}"
    );
}

/// What a bundled network must win by over oracle-tuned TV (issue #30's goal on a fast crop);
/// random weights lose to TV by several dB, and a half-trained network by less than this margin
/// on at least one row (the bundled DnCNNs do, and the DRUNet at step 38 500 of its training).
const BEAT_TV_DB: f64 = 0.3;

/// The held-out photograph crops of the fast tests (the goal is on photographs), as the
/// PSNR table's images.
fn held_out_photo_crops() -> Vec<tessera::train::data::NamedImage> {
    use tessera::train::data::NamedImage;
    vec![
        NamedImage {
            name: "camera crop".into(),
            image: photo("camera_128.png"),
        },
        NamedImage {
            name: "astronaut crop".into(),
            image: photo("astronaut_128.png"),
        },
    ]
}

/// The held-out generated image's crops, grey and colour.
fn held_out_generated_crops() -> Vec<tessera::train::data::NamedImage> {
    use tessera::train::data::NamedImage;
    vec![
        NamedImage {
            name: "generated grey".into(),
            image: held_out_generated(true),
        },
        NamedImage {
            name: "generated colour".into(),
            image: held_out_generated(false),
        },
    ]
}

/// Random weights of a bundled architecture written to `dir` as a weight file, read back as an
/// extra network of the PSNR table (named `random_…`).
fn random_net(
    dir: &Path,
    name: &str,
    net: &tessera::nn::Network,
) -> tessera::train::eval::ExtraNet {
    let path = dir.join(format!("random_{name}.safetensors"));
    net.state_dict("random")
        .unwrap()
        .save_safetensors(&path)
        .unwrap();
    tessera::train::eval::ExtraNet::load(&path).unwrap()
}

/// What the goal test scores: the bundled networks, or (for a training in progress) the weight
/// files in `TESSERA_GOAL_WEIGHTS` (comma-separated, e.g. copies of
/// `~/.cache/tessera/train30/runs/{grey,colour}/drunet_*.safetensors`) instead of them.
const CANDIDATES_VAR: &str = "TESSERA_GOAL_WEIGHTS";

/// The rows (image of `images`, σ) on which the best scored network of the image's channel count
/// does not beat TV at its oracle strength by `BEAT_TV_DB`, the rows on which random weights of
/// the bundled architectures (DnCNN and DRUNet) do (both should be empty), and each row's margin
/// over TV.
fn rows_short_of_tv(
    images: &[tessera::train::data::NamedImage],
) -> (Vec<String>, Vec<String>, Vec<String>) {
    use tessera::train::eval::{ExtraNet, psnr_table};
    let dir = tempfile::tempdir().unwrap();
    let mut extra = Vec::new();
    for channels in [1, 3] {
        let arch = tessera::nn::DncnnArch {
            in_channels: channels,
            out_channels: channels,
            depth: tessera::nn::bundled::DNCNN_DEPTH,
            nf: tessera::nn::bundled::DNCNN_NF,
            ..Default::default()
        };
        let dncnn = tessera::nn::Dncnn::random(arch, 5).unwrap();
        extra.push(random_net(
            dir.path(),
            &format!("dncnn_{channels}"),
            dncnn.network(),
        ));
        let arch = tessera::nn::DrunetArch {
            in_channels: channels,
            out_channels: channels,
            nc: tessera::nn::bundled::DRUNET_NC,
            nb: tessera::nn::bundled::DRUNET_NB,
            dim: 2,
        };
        let drunet = tessera::nn::Drunet::random(arch, 5).unwrap();
        extra.push(random_net(
            dir.path(),
            &format!("drunet_{channels}"),
            drunet.network(),
        ));
    }
    let candidates: Vec<String> = std::env::var(CANDIDATES_VAR)
        .map(|v| v.split(',').map(String::from).collect())
        .unwrap_or_default();
    for file in &candidates {
        extra.push(ExtraNet::load(Path::new(file)).unwrap());
    }
    // A candidate file scores under its file name (a grey DRUNet on colour rows with " (opponent
    // colour)" after it).
    let scored = |name: &str| {
        if candidates.is_empty() {
            !name.starts_with("random_")
        } else {
            candidates.iter().any(|c| {
                Path::new(c)
                    .file_name()
                    .is_some_and(|f| name.starts_with(&*f.to_string_lossy()))
            })
        }
    };
    let rows = psnr_table(images, &[0.02, 0.05, 0.1, 0.2], 30, &extra, None).unwrap();
    let (mut short, mut random_wins, mut margins) = (Vec::new(), Vec::new(), Vec::new());
    for r in &rows {
        let line = |who: &str, p: f64| {
            format!(
                "{} σ {}: {who} {p:.2} dB vs TV {:.2} dB (k {}): {:+.2} dB",
                r.image,
                r.sigma,
                r.tv.0,
                r.tv.1,
                p - r.tv.0
            )
        };
        let best = r
            .nets
            .iter()
            .filter(|(name, _)| scored(name))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            Some((name, p)) => {
                margins.push(line(name, *p));
                if *p < r.tv.0 + BEAT_TV_DB {
                    short.push(line(name, *p));
                }
            }
            None => short.push(format!("{} σ {}: no network scored", r.image, r.sigma)),
        }
        for (name, p) in r.nets.iter().filter(|(n, _)| n.starts_with("random_")) {
            margins.push(line(name, *p));
            if *p >= r.tv.0 + BEAT_TV_DB {
                random_wins.push(line(name, *p));
            }
        }
    }
    (short, random_wins, margins)
}

/// #30's goal on the fast test's held-out photograph crops (camera grey, astronaut colour in the
/// opponent colour space), at σ 0.02, 0.05, 0.1 and 0.2. It fails with the DnCNNs and with the
/// DRUNet at step 38 500 of its training (camera crop at σ 0.02: +0.04 dB).
#[test]
fn the_bundled_denoisers_beat_oracle_tuned_tv_on_held_out_photographs_and_random_weights_do_not() {
    assert_beat_tv(&held_out_photo_crops());
}

/// The same on the generated image (piecewise smooth, TV's best case), beyond the goal.
#[test]
#[ignore = "beyond #30's goal (photographs): on the generated crops at σ 0.02 the bundled DRUNet (the low-σ fine-tune) is short of oracle TV + 0.3 dB (−0.18 dB grey, −0.00 dB colour; the step-60 000 file: −0.54, −0.76); σ 0.05–0.2 pass"]
fn the_bundled_denoisers_beat_oracle_tuned_tv_on_the_held_out_generated_image() {
    assert_beat_tv(&held_out_generated_crops());
}

fn assert_beat_tv(images: &[tessera::train::data::NamedImage]) {
    let (short, random_wins, margins) = rows_short_of_tv(images);
    // The margins of every row (shown with --nocapture), to tell how far a training has come.
    eprintln!("{}", margins.join("\n"));
    assert!(
        random_wins.is_empty(),
        "random weights beat TV (the margin tests nothing):\n{}",
        random_wins.join("\n")
    );
    assert!(
        short.is_empty(),
        "the scored networks do not beat oracle TV by {BEAT_TV_DB} dB on:\n{}",
        short.join("\n")
    );
}

/// The PGD rule of docs/PNP.md gives the table's step and σ_d for the imaging presets from their
/// operators' norms and noise levels (the operators built from the presets, the norm by the
/// power method, as a run derives its step), and the presets whose denoiser is the σ-conditional
/// DRUNet (`quick`, `presets/photo_deblur.toml`) follow the DPIR rule (`PnpConfig::dpir` of their
/// noise level).
#[test]
fn the_documented_step_and_sigma_rule_gives_the_documented_values() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let photo = here.join("presets/photo_deblur.toml");
    // (preset, an image shape its operators accept, documented τ, documented σ_d). Circular
    // blurs' norms do not depend on the image's size, so multiblur's is taken on 128².
    let documented = [
        ("quick", vec![1, 3, 128, 128], 0.9974, 0.02996),
        ("multiblur", vec![1, 3, 128, 128], 0.1238, 0.03518),
        ("tomography2d", vec![1, 1, 256, 256], 4.496e-5, 6.705e-5),
        (
            photo.to_str().unwrap(),
            vec![1, 3, 256, 256],
            0.9969,
            0.01997,
        ),
    ];
    for (name, x_shape, tau_doc, sigma_doc) in documented {
        let preset = Preset::load(name, &[]).unwrap().preset;
        let ops = preset
            .physics
            .iter()
            .map(|c| c.build(&x_shape, None))
            .collect::<tessera::Result<Vec<_>>>()
            .unwrap();
        let stack = Stack::new(ops).unwrap();
        let noise = preset.noise.as_ref().unwrap().sigma() as f64;
        let w = preset
            .fidelity
            .gradient_weight(StackedLinearPhysics::len(&stack));
        let tau = 0.99 / (w * StackedLinearPhysics::op_norm_sq(&stack, &x_shape).unwrap());
        let sigma_d = rule_denoiser_sigma(noise, tau, w);
        let close = |a: f64, b: f64| (a - b).abs() <= 0.005 * b;
        assert!(
            close(tau, tau_doc),
            "{name}: τ {tau} (documented {tau_doc})"
        );
        assert!(
            close(sigma_d, sigma_doc),
            "{name}: σ_d {sigma_d} (documented {sigma_doc})"
        );
        // The presets that run the bundled DRUNet follow DPIR's rule exactly.
        if name != "tomography2d" {
            let AlgorithmConfig::Pnp(pnp) = &preset.algorithm else {
                panic!("{name} is a PnP preset")
            };
            let rule = tessera::optim::PnpConfig {
                clamp: Some([0.0, 1.0]),
                ..tessera::optim::PnpConfig::dpir(noise as f32)
            };
            assert_eq!(*pnp, rule, "{name}");
            assert!(matches!(
                preset.denoiser,
                Some(DenoiserConfig::Drunet(ref d)) if d.weights.is_none() && d.opponent_colour
            ));
        }
    }
}

/// Parity with deepinv's DPIR: `PnpConfig::dpir` (HQS, its data step in closed form for this
/// circular blur, as deepinv's) with the bundled DRUNet in the opponent colour space gives
/// deepinv's HQS iterates (`get_DPIR_params`, its exact FFT prox of `BlurFFT`) with the same
/// weights, on a 64² colour photograph crop under a 1.5 px blur and noise 0.03
/// (`tests/fixtures/deepinv/dpir_*.npy`, scripts/make_dpir_fixture.py; regenerate it when the
/// bundled DRUNet changes). The difference is float rounding through 8 networks and 8 data steps:
/// 6.2e-7 relative (2.3e-6 at most) measured with the weights bundled on 2026-11-29, asserted
/// within 3e-6 (with the data step by CG to 10⁻⁶ it was 2.7e-6).
#[test]
fn dpir_with_the_bundled_drunet_is_deepinv_dpir() {
    use std::ops::ControlFlow;
    use tessera::fidelity::FidelityConfig;
    use tessera::nn::DrunetConfig;
    use tessera::optim::{Monitor, PnpConfig};
    use tessera::physics::blur::{Blur, Padding};

    let fixture = |name: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/deepinv")
            .join(format!("dpir_{name}.npy"));
        tessera::io::read_array(&path).unwrap()
    };
    let (x, kernel, y, want) = (
        fixture("x"),
        fixture("kernel"),
        fixture("y"),
        fixture("out"),
    );
    let stack = Stack::new(vec![Box::new(
        Blur::new(kernel, Padding::Circular).unwrap(),
    )])
    .unwrap();
    let denoiser = DenoiserConfig::Drunet(DrunetConfig::bundled(3))
        .build()
        .unwrap();
    let monitor = Monitor {
        ground_truth: None,
        data_range: 1.0,
        ssim_every: 0,
    };
    let mut go_on = |_: &tessera::optim::IterationReport, _: &Tensor| ControlFlow::Continue(());
    let run = tessera::optim::pnp(
        &stack,
        &FidelityConfig::default(),
        denoiser.as_ref(),
        &[y],
        x.shape(),
        &PnpConfig::dpir(0.03),
        &monitor,
        &mut go_on,
    )
    .unwrap();
    assert_eq!(run.history.len(), 8);
    let diff = run.x.sub(&want);
    let relative = diff.norm() / want.norm();
    let max = diff.data().iter().fold(0f32, |m, d| m.max(d.abs()));
    eprintln!("DPIR against deepinv: {relative:e} relative, {max:e} at most");
    assert!(relative < 3e-6, "{relative:e} relative, {max:e} at most");
    // And it restores: deepinv's output is 28.45 dB from the truth.
    assert!(psnr(&run.x, &x, 1.0).unwrap() > 27.0);
}
