//! Tiling: parity with deepinv 0.5.0's tile slices, exact round trips, ownership, blend weights,
//! tiled denoising equal to untiled, and config errors.

use proptest::prelude::*;
use tessera::Tensor;
use tessera::denoise::Denoiser;
use tessera::tiling::{
    Assembly, BasicTiling, Extent, OverlapTiling, PadMode, TilePlan, TiledDenoiser, TilingConfig,
    TilingKind, TilingStrategy,
};

/// Parses deepinv's `str(global_slices)`: a list of tuples of `slice(a, b, None)`; `slice(None, …)`
/// (batch and channel) is skipped. Returns per tile the `(start, stop)` of every tiled axis.
fn parse_slices(s: &str) -> Vec<Vec<(usize, usize)>> {
    let body = s.trim().trim_start_matches("[(").trim_end_matches(")]");
    body.split("), (")
        .map(|tuple| {
            tuple
                .split("slice(")
                .skip(1)
                .filter(|sl| !sl.starts_with("None"))
                .map(|sl| {
                    let nums: Vec<&str> = sl.split([',', ')']).map(str::trim).collect();
                    (nums[0].parse().unwrap(), nums[1].parse().unwrap())
                })
                .collect()
        })
        .collect()
}

#[test]
fn overlap_tiling_matches_every_deepinv_manifest_entry() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/deepinv/manifest.json"
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let entries = manifest["tiling"].as_array().unwrap();
    assert!(!entries.is_empty());
    for e in entries {
        let img: Vec<usize> = e["img"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let patch = e["patch"].as_u64().unwrap() as usize;
        let overlap = e["overlap"].as_u64().unwrap() as usize;
        let expected = parse_slices(e["global_slices"].as_str().unwrap());
        assert_eq!(expected.len(), e["num_patches"].as_u64().unwrap() as usize);

        let plan = OverlapTiling::new(patch, overlap).plan(&img).unwrap();
        let got: Vec<Vec<(usize, usize)>> = plan
            .tiles()
            .iter()
            .map(|t| t.window().iter().map(|s| (s.start, s.end())).collect())
            .collect();
        assert_eq!(got, expected, "img {img:?} patch {patch} overlap {overlap}");
        assert_eq!(plan.padding(), &vec![(overlap, overlap); 2][..]);
        assert_eq!(plan.pad_mode(), PadMode::Reflect);
        // deepinv's crop/target slices: region = [st + trim, st + p) (image coords), crop starts at
        // rf + trim inside the window.
        for t in plan.tiles() {
            for a in 0..2 {
                let (w, r) = (t.window()[a], t.region()[a]);
                assert_eq!(r.end(), w.start + patch);
                assert_eq!(t.region_in_patch()[a], overlap + (r.start - w.start));
            }
        }
        assert!(plan.coverage().iter().all(|&c| c == 1.0));
    }
}

#[test]
fn parse_slices_reads_python_reprs() {
    let s = "[(slice(None, None, None), slice(None, None, None), slice(0, 12, None), slice(8, 20, \
             None)), (slice(None, None, None), slice(None, None, None), slice(3, 15, None), \
             slice(0, 12, None))]";
    assert_eq!(
        parse_slices(s),
        vec![vec![(0, 12), (8, 20)], vec![(3, 15), (0, 12)]]
    );
}

/// `x ↦ 2x + 1`: pointwise, so tiling must not change its result at all.
struct Affine;

impl Denoiser for Affine {
    fn name(&self) -> String {
        "2x+1".into()
    }
    fn denoise(&self, x: &Tensor, _sigma: f32) -> tessera::Result<Tensor> {
        let mut y = x.clone();
        y.map_inplace(|v| 2.0 * v + 1.0);
        Ok(y)
    }
}

/// Counts its calls and the largest batch it saw.
struct Spy {
    calls: std::sync::atomic::AtomicUsize,
    max_rows: std::sync::atomic::AtomicUsize,
}

impl Denoiser for Spy {
    fn name(&self) -> String {
        "spy".into()
    }
    fn denoise(&self, x: &Tensor, _sigma: f32) -> tessera::Result<Tensor> {
        use std::sync::atomic::Ordering::SeqCst;
        self.calls.fetch_add(1, SeqCst);
        self.max_rows.fetch_max(x.shape()[0], SeqCst);
        Ok(x.clone())
    }
}

fn image(shape: &[usize], seed: u64) -> Tensor {
    // A cheap deterministic pseudo-random image with awkward float values.
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    Tensor::from_fn(shape, |_| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 7.3
    })
}

fn strategy(
    kind: TilingKind,
    patch: Vec<usize>,
    overlap: Vec<usize>,
    stride: Option<Vec<usize>>,
) -> Box<dyn TilingStrategy> {
    match kind {
        TilingKind::Basic => Box::new(BasicTiling {
            patch_size: Extent::PerAxis(patch),
            num_splits: None,
        }),
        _ => Box::new(OverlapTiling {
            patch_size: Extent::PerAxis(patch),
            overlap: Extent::PerAxis(overlap),
            stride: stride.map(Extent::PerAxis),
            pad_mode: PadMode::Reflect,
            even: false,
            blend: kind == TilingKind::Blend,
        }),
    }
}

/// Extract → identity → assemble, with the tiles split into batches and fed in a shuffled order.
fn round_trip(plan: &TilePlan, x: &Tensor, max_batch: Option<usize>, rotate: usize) -> Tensor {
    let mut indices: Vec<usize> = (0..plan.num_tiles()).collect();
    let n = indices.len();
    indices.rotate_left(rotate % n);
    let mut asm = plan.assembler(x.shape()).unwrap();
    for group in plan.batches(&indices, max_batch) {
        let patches = plan.extract(x, &group).unwrap();
        asm.add_batch(&group, &patches).unwrap();
    }
    asm.finish().unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.data().iter().map(|v| v.to_bits()).collect()
}

/// Random geometry: spatial shape, patch ≤ shape, overlap < shape (reflect), stride ≤ patch.
#[allow(clippy::type_complexity)]
fn geometry(
    ndim: usize,
    max_len: usize,
) -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>, Option<Vec<usize>>)> {
    prop::collection::vec(
        (1..=max_len).prop_flat_map(|d| (Just(d), 1..=d, 0..d, 0usize..4)),
        ndim,
    )
    .prop_flat_map(|axes| {
        let shape: Vec<usize> = axes.iter().map(|a| a.0).collect();
        let patch: Vec<usize> = axes.iter().map(|a| a.1).collect();
        let overlap: Vec<usize> = axes.iter().map(|a| a.2 % 6).collect();
        let strides: Vec<BoxedStrategy<usize>> = patch.iter().map(|&p| (1..=p).boxed()).collect();
        (
            Just(shape),
            Just(patch),
            Just(overlap),
            prop::option::of(strides),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_is_bitwise_exact_2d(
        (shape, patch, overlap, stride) in geometry(2, 24),
        b in 1usize..3, c in 1usize..3, max_batch in prop::option::of(1usize..5),
        seed in any::<u64>(), rotate in 0usize..7,
    ) {
        for kind in [TilingKind::Overlap, TilingKind::Basic, TilingKind::Blend] {
            let s = strategy(kind, patch.clone(), overlap.clone(), stride.clone());
            let plan = s.plan(&shape).unwrap();
            let x = image(&[b, c, shape[0], shape[1]], seed);
            let y = round_trip(&plan, &x, max_batch, rotate);
            prop_assert_eq!(bits(&y), bits(&x), "{}", s.name());
            check_coverage(&plan);
        }
    }

    #[test]
    fn round_trip_is_bitwise_exact_3d(
        (shape, patch, overlap, stride) in geometry(3, 10),
        b in 1usize..3, c in 1usize..3, max_batch in prop::option::of(1usize..4),
        seed in any::<u64>(), rotate in 0usize..7,
    ) {
        for kind in [TilingKind::Overlap, TilingKind::Basic, TilingKind::Blend] {
            let s = strategy(kind, patch.clone(), overlap.clone(), stride.clone());
            let plan = s.plan(&shape).unwrap();
            let x = image(&[b, c, shape[0], shape[1], shape[2]], seed);
            let y = round_trip(&plan, &x, max_batch, rotate);
            prop_assert_eq!(bits(&y), bits(&x), "{}", s.name());
            check_coverage(&plan);
        }
    }

    #[test]
    fn tiled_pointwise_denoiser_equals_untiled(
        (shape, patch, overlap, stride) in geometry(2, 20),
        max_batch in prop::option::of(1usize..4), seed in any::<u64>(),
    ) {
        let x = image(&[2, 3, shape[0], shape[1]], seed);
        let reference = Affine.denoise(&x, 0.1).unwrap();
        for kind in [TilingKind::Overlap, TilingKind::Basic] {
            let tiled = TiledDenoiser::new(
                Box::new(Affine),
                strategy(kind, patch.clone(), overlap.clone(), stride.clone()),
                max_batch,
            );
            prop_assert_eq!(bits(&tiled.denoise(&x, 0.1).unwrap()), bits(&reference));
        }
        // Every tile computes the same 2x+1 for a pixel, so the weighted mean must reproduce it
        // bitwise as well.
        let tiled = TiledDenoiser::new(
            Box::new(Affine),
            strategy(TilingKind::Blend, patch, overlap, stride),
            max_batch,
        );
        prop_assert_eq!(bits(&tiled.denoise(&x, 0.1).unwrap()), bits(&reference));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// `even` tiles: the same round trip, never more tiles than deepinv's geometry and never more
    /// pixels denoised (the windows shrink, the last one no longer recomputes its neighbour).
    #[test]
    fn even_tiles_round_trip_and_never_cost_more_than_deepinvs(
        (shape, patch, overlap, _) in geometry(2, 40),
        blend in any::<bool>(), seed in any::<u64>(), rotate in 0usize..7,
    ) {
        let deepinv = OverlapTiling {
            patch_size: Extent::PerAxis(patch),
            overlap: Extent::PerAxis(overlap),
            stride: None,
            pad_mode: PadMode::Reflect,
            blend,
            even: false,
        };
        let even = OverlapTiling { even: true, ..deepinv.clone() };
        let plan = even.plan(&shape).unwrap();
        let x = image(&[1, 2, shape[0], shape[1]], seed);
        prop_assert_eq!(bits(&round_trip(&plan, &x, None, rotate)), bits(&x));
        check_coverage(&plan);
        let reference = deepinv.plan(&shape).unwrap();
        let area = |p: &TilePlan| -> usize {
            p.tiles().iter().map(|t| t.window_shape().iter().product::<usize>()).sum()
        };
        prop_assert!(plan.num_tiles() <= reference.num_tiles());
        prop_assert!(area(&plan) <= area(&reference), "{} > {}", area(&plan), area(&reference));
    }
}

/// Crop plans: every pixel has exactly one owner and regions stay inside the image. Blend plans:
/// weights sum to one.
fn check_coverage(plan: &TilePlan) {
    let cov = plan.coverage();
    match plan.assembly() {
        Assembly::Crop => assert!(cov.iter().all(|&c| c == 1.0), "ownership {cov:?}"),
        Assembly::Blend => assert!(
            cov.iter().all(|&c| (c - 1.0).abs() < 1e-6),
            "weight sums {cov:?}"
        ),
    }
}

#[test]
fn blend_round_trip_keeps_signed_zeros_and_specials() {
    let plan = OverlapTiling {
        blend: true,
        ..OverlapTiling::new(5, 3)
    }
    .plan(&[11, 12])
    .unwrap();
    let mut x = image(&[1, 1, 11, 12], 4);
    let d = x.data_mut();
    d[17] = -0.0;
    d[18] = 0.0;
    d[30] = f32::MIN_POSITIVE / 8.0;
    d[31] = 3.0e38;
    assert_eq!(bits(&round_trip(&plan, &x, None, 0)), bits(&x));
}

#[test]
fn ownership_is_exactly_one_by_explicit_count() {
    // Independent of `coverage`: paint every region and count.
    for (shape, patch, overlap, stride) in [
        (vec![16, 23], 8, 2, None),
        (vec![37, 29], 7, 5, Some(3)),
        (vec![9, 10, 11], 4, 2, Some(4)),
    ] {
        let s = OverlapTiling {
            stride: stride.map(Extent::Uniform),
            ..OverlapTiling::new(patch, overlap)
        };
        let plan = s.plan(&shape).unwrap();
        let n: usize = shape.iter().product();
        let mut count = vec![0u32; n];
        for t in plan.tiles() {
            let r = t.region();
            let mut idx = vec![0usize; shape.len()];
            'outer: loop {
                let mut flat = 0;
                for a in 0..shape.len() {
                    flat = flat * shape[a] + r[a].start + idx[a];
                }
                count[flat] += 1;
                for a in (0..shape.len()).rev() {
                    idx[a] += 1;
                    if idx[a] < r[a].size {
                        continue 'outer;
                    }
                    idx[a] = 0;
                }
                break;
            }
        }
        assert!(count.iter().all(|&c| c == 1), "{shape:?}");
    }
}

#[test]
fn blend_weights_sum_to_one_and_blend_is_smooth() {
    let s = OverlapTiling {
        blend: true,
        ..OverlapTiling::new(vec![8, 12], vec![4, 3])
    };
    let plan = s.plan(&[30, 41]).unwrap();
    check_coverage(&plan);
    // Some tile must actually share pixels (otherwise "blend" would be a crop).
    let total: usize = plan
        .tiles()
        .iter()
        .map(|t| t.region().iter().map(|r| r.size).product::<usize>())
        .sum();
    assert!(total > 30 * 41);
    // Blending two tiles whose outputs differ gives values between them, not a seam.
    let x = Tensor::zeros(&[1, 1, 30, 41]);
    let mut pairs = Vec::new();
    for i in 0..plan.num_tiles() {
        let p = plan.extract(&x, &[i]).unwrap();
        let v = i as f32;
        pairs.push((i, Tensor::full(p.shape(), v)));
    }
    let y = plan.assemble(&pairs, x.shape()).unwrap();
    let (lo, hi) = y.min_max();
    assert!(lo >= 0.0 && hi <= (plan.num_tiles() - 1) as f32);
    let fractional = y.data().iter().filter(|v| v.fract() != 0.0).count();
    assert!(fractional > 0, "no pixel was blended");
}

#[test]
fn assemble_is_order_independent_and_checks_completeness() {
    let plan = OverlapTiling {
        blend: true,
        ..OverlapTiling::new(6, 2)
    }
    .plan(&[13, 17])
    .unwrap();
    let x = image(&[1, 2, 13, 17], 7);
    let mut pairs = TiledDenoiser::new(Box::new(Affine), Box::new(OverlapTiling::new(6, 2)), None)
        .denoise_tiles(&plan, &x, &(0..plan.num_tiles()).collect::<Vec<_>>(), 0.0)
        .unwrap();
    // Perturb the patches so blending has something to average.
    for (i, p) in pairs.iter_mut() {
        p.map_inplace(|v| v + *i as f32 * 0.37);
    }
    let a = plan.assemble(&pairs, x.shape()).unwrap();
    pairs.reverse();
    let b = plan.assemble(&pairs, x.shape()).unwrap();
    assert_eq!(bits(&a), bits(&b));
    pairs.pop();
    let err = plan.assemble(&pairs, x.shape()).unwrap_err().to_string();
    assert!(err.contains("never added"), "{err}");
    let mut asm = plan.assembler(x.shape()).unwrap();
    asm.add(pairs[0].0, &pairs[0].1).unwrap();
    assert!(asm.add(pairs[0].0, &pairs[0].1).is_err(), "duplicate tile");
}

#[test]
fn extract_order_is_tile_major() {
    let plan = OverlapTiling::new(4, 1).plan(&[8, 8]).unwrap();
    let x = image(&[2, 3, 8, 8], 3);
    let both = plan.extract(&x, &[3, 1]).unwrap();
    assert_eq!(both.shape(), &[4, 3, 6, 6]);
    let t3 = plan.extract(&x, &[3]).unwrap();
    let t1 = plan.extract(&x, &[1]).unwrap();
    assert_eq!(both.batch_range(0, 2), t3);
    assert_eq!(both.batch_range(2, 4), t1);
}

#[test]
fn max_batch_size_limits_denoiser_batches() {
    use std::sync::atomic::Ordering::SeqCst;
    let spy = std::sync::Arc::new(Spy {
        calls: 0.into(),
        max_rows: 0.into(),
    });
    struct Shared(std::sync::Arc<Spy>);
    impl Denoiser for Shared {
        fn name(&self) -> String {
            self.0.name()
        }
        fn denoise(&self, x: &Tensor, s: f32) -> tessera::Result<Tensor> {
            self.0.denoise(x, s)
        }
    }
    let config = TilingConfig {
        patch_size: Extent::Uniform(8),
        overlap: Some(Extent::Uniform(2)),
        max_batch_size: Some(4),
        ..Default::default()
    };
    let tiled = TiledDenoiser::from_config(Box::new(Shared(spy.clone())), &config).unwrap();
    let x = image(&[3, 1, 16, 23], 1);
    let y = tiled.denoise(&x, 0.1).unwrap();
    assert_eq!(bits(&y), bits(&x));
    // 6 tiles in batches of ≤ 4 tiles × B = 3 rows.
    assert_eq!(spy.calls.load(SeqCst), 2);
    assert_eq!(spy.max_rows.load(SeqCst), 12);
    assert!(tiled.name().contains("overlap(patch 8, overlap 2"));
}

#[test]
fn volumes_and_per_axis_sizes_work_through_the_config() {
    let config: TilingConfig = toml::from_str(
        "kind = \"blend\"\npatch_size = [3, 8, 8]\noverlap = [1, 2, 2]\nstride = [2, 8, 6]",
    )
    .unwrap();
    let tiled = TiledDenoiser::from_config(Box::new(Affine), &config).unwrap();
    let x = image(&[1, 2, 7, 19, 20], 5);
    let plan = tiled.plan(x.shape()).unwrap();
    assert_eq!(plan.padded_spatial(), vec![9, 23, 24]);
    assert_eq!(
        bits(&tiled.denoise(&x, 0.0).unwrap()),
        bits(&Affine.denoise(&x, 0.0).unwrap())
    );
}

#[test]
fn basic_tiling_follows_deepinv_splits() {
    // deepinv BasicStrategy((1, 1, 10, 7), tiling_dims=(-2, -1), num_splits=(3, 2)):
    // rows 4, 3, 3; columns 4, 3.
    let plan = BasicTiling {
        patch_size: Extent::Uniform(1),
        num_splits: Some(Extent::PerAxis(vec![3, 2])),
    }
    .plan(&[10, 7])
    .unwrap();
    let got: Vec<Vec<(usize, usize)>> = plan
        .tiles()
        .iter()
        .map(|t| t.window().iter().map(|s| (s.start, s.end())).collect())
        .collect();
    assert_eq!(
        got,
        vec![
            vec![(0, 4), (0, 4)],
            vec![(0, 4), (4, 7)],
            vec![(4, 7), (0, 4)],
            vec![(4, 7), (4, 7)],
            vec![(7, 10), (0, 4)],
            vec![(7, 10), (4, 7)],
        ]
    );
    assert_eq!(plan.padding(), &[(0, 0), (0, 0)]);
    // Uneven blocks are grouped by shape for batching.
    let groups = plan.batches(&(0..6).collect::<Vec<_>>(), None);
    assert_eq!(groups, vec![vec![0], vec![1], vec![2, 4], vec![3, 5]]);
}

#[test]
fn errors_name_the_field_and_sizes() {
    let err = |c: TilingConfig, shape: &[usize]| -> String {
        match c.build() {
            Err(e) => e.to_string(),
            Ok(s) => s.plan(shape).unwrap_err().to_string(),
        }
    };
    let big = err(
        TilingConfig {
            patch_size: Extent::Uniform(64),
            ..Default::default()
        },
        &[48, 100],
    );
    assert!(
        big.contains("tiling.patch_size") && big.contains("64") && big.contains("48"),
        "{big}"
    );
    let zero = err(
        TilingConfig {
            patch_size: Extent::PerAxis(vec![8, 0]),
            ..Default::default()
        },
        &[48, 100],
    );
    assert!(zero.contains("tiling.patch_size"), "{zero}");
    let basic_big = err(
        TilingConfig {
            kind: TilingKind::Basic,
            patch_size: Extent::Uniform(200),
            ..Default::default()
        },
        &[48, 100],
    );
    assert!(
        basic_big.contains("tiling.patch_size") && basic_big.contains("48"),
        "{basic_big}"
    );
    let halo = err(
        TilingConfig {
            patch_size: Extent::Uniform(4),
            overlap: Some(Extent::Uniform(6)),
            ..Default::default()
        },
        &[6, 100],
    );
    assert!(halo.contains("tiling.overlap"), "{halo}");
    // The same halo is fine with replicate padding.
    let ok = TilingConfig {
        patch_size: Extent::Uniform(4),
        overlap: Some(Extent::Uniform(6)),
        pad_mode: Some(PadMode::Replicate),
        ..Default::default()
    };
    let plan = ok.build().unwrap().plan(&[6, 100]).unwrap();
    let x = image(&[1, 1, 6, 100], 9);
    assert_eq!(bits(&round_trip(&plan, &x, Some(3), 1)), bits(&x));
    let stride = err(
        TilingConfig {
            patch_size: Extent::Uniform(8),
            stride: Some(Extent::Uniform(9)),
            ..Default::default()
        },
        &[48, 100],
    );
    assert!(stride.contains("tiling.stride"), "{stride}");
    let rank = TiledDenoiser::from_config(Box::new(Affine), &TilingConfig::default())
        .unwrap()
        .denoise(&Tensor::zeros(&[4, 4]), 0.0)
        .unwrap_err()
        .to_string();
    assert!(rank.contains("tiling"), "{rank}");
    let shape = OverlapTiling::new(4, 1)
        .plan(&[8, 8])
        .unwrap()
        .extract(&Tensor::zeros(&[1, 1, 8, 9]), &[0])
        .unwrap_err()
        .to_string();
    assert!(shape.contains("tiling.extract"), "{shape}");
}

/// Timing, not a test: `cargo test --release --test tiling -- --ignored --nocapture timing`.
#[test]
#[ignore]
fn timing_extract_assemble_vs_copy() {
    use std::time::Instant;
    let x = image(&[1, 3, 2048, 2048], 1);
    let plan = OverlapTiling::new(256, 32).plan(&[2048, 2048]).unwrap();
    let all: Vec<usize> = (0..plan.num_tiles()).collect();
    let reps = 5;
    let mut best_copy = f64::MAX;
    let mut best_tiled = f64::MAX;
    let mut best_blend = f64::MAX;
    let blend_plan = OverlapTiling {
        blend: true,
        ..OverlapTiling::new(256, 32)
    }
    .plan(&[2048, 2048])
    .unwrap();
    for _ in 0..reps {
        let t = Instant::now();
        let y = x.clone();
        best_copy = best_copy.min(t.elapsed().as_secs_f64());
        std::hint::black_box(&y);
        for (p, best) in [(&plan, &mut best_tiled), (&blend_plan, &mut best_blend)] {
            let t = Instant::now();
            let patches = p.extract(&x, &all).unwrap();
            let mut asm = p.assembler(x.shape()).unwrap();
            asm.add_batch(&all, &patches).unwrap();
            let y = asm.finish().unwrap();
            *best = best.min(t.elapsed().as_secs_f64());
            assert_eq!(bits(&y), bits(&x));
        }
    }
    println!(
        "3x2048x2048, patch 256, overlap 32, {} tiles: copy {:.2} ms, extract+assemble crop {:.2} ms \
         (x{:.1}), blend {:.2} ms (x{:.1})",
        plan.num_tiles(),
        best_copy * 1e3,
        best_tiled * 1e3,
        best_tiled / best_copy,
        best_blend * 1e3,
        best_blend / best_copy
    );
}
