//! `cargo bench --bench dsn`: one Multi-DSN training step of the bundled `dsn_shapes` network
//! (32×32 images, width 8, codes 32, batch 16 per domain) in one process, with one source and
//! K = 1, 3, 7 targets (MMD similarity; DANN at K = 3), against a baseline measured in the same
//! run: the source-only classifier's step on the same network (shared encoder → classifier →
//! cross-entropy, backward, Adam). Prints median and minimum seconds, the ratio to the baseline, that
//! ratio per domain, and the share of the step's time in forward passes, MMD terms, backward passes,
//! Adam and the rest (gradient sum in domain order, loss gather). Environment: TESSERA_BENCH_REPS
//! (default 20).

use tessera::dist::SingleProcess;
use tessera::dsn::data::generate;
use tessera::dsn::parallel::{StepTimes, Trainer};
use tessera::dsn::{DomainBatch, Dsn, DsnArch, LossWeights, Similarity};
use tessera::nn::Features;
use tessera::optim::adam::Adam;

const BATCH: usize = 16;

fn batch(arch: &DsnArch, domain: usize) -> DomainBatch {
    let d = generate(arch.classes, arch.image_size, BATCH, 7, domain);
    DomainBatch {
        domain,
        images: Features {
            batch: BATCH,
            channels: 1,
            dims: [1, arch.image_size, arch.image_size],
            data: d.images,
        },
        labels: (domain == 0).then_some(d.labels),
    }
}

#[path = "support/timing.rs"]
mod timing;

/// Median and minimum of `reps` timed calls after 2 warm-up calls.
fn time(reps: usize, f: impl FnMut()) -> (f64, f64) {
    timing::time_calls(2, reps, f)
}

fn main() {
    let reps: usize = std::env::var("TESSERA_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let arch = DsnArch::default();
    println!(
        "DSN training step, dsn_shapes network ({}² images, width {}, code {}), batch {BATCH} per domain, {reps} reps",
        arch.image_size, arch.width, arch.code
    );

    let model = Dsn::new(arch, 2, &[0], 0).expect("the bundled architecture is valid");
    let mut shared = model.clone();
    let mut adam = Adam::new(model.shared_param_count());
    let source = batch(&arch, 0);
    let base = time(reps, || {
        let (_, g) = shared.task_backward(&source, 1.0).expect("source batch");
        adam.step(shared.shared_params_mut(), &g, 1e-4);
    });
    println!(
        "{:<28} median {:>8.4} s  min {:>8.4} s  (baseline)",
        "source-only step", base.0, base.1
    );

    for (k, sim) in [
        (1, Similarity::Mmd),
        (3, Similarity::Mmd),
        (7, Similarity::Mmd),
        (3, Similarity::Dann),
    ] {
        let comm = SingleProcess;
        let mut trainer = Trainer::new(&comm, arch, k + 1, 0, LossWeights::default(), sim)
            .expect("the bundled architecture is valid");
        let batches: Vec<DomainBatch> = (0..=k).map(|d| batch(&arch, d)).collect();
        let mut parts = StepTimes::default();
        let t = time(reps, || {
            let (_, s) = trainer.step(&batches, 1e-4, 0.5).expect("step");
            parts.forward_secs += s.forward_secs;
            parts.similarity_secs += s.similarity_secs;
            parts.backward_secs += s.backward_secs;
            parts.update_secs += s.update_secs;
            parts.exchange_secs += s.exchange_secs;
        });
        let total = parts.forward_secs
            + parts.similarity_secs
            + parts.backward_secs
            + parts.update_secs
            + parts.exchange_secs;
        let share = |v: f64| 100.0 * v / total.max(f64::MIN_POSITIVE);
        println!(
            "{:<28} median {:>8.4} s  min {:>8.4} s  ratio to source-only {:>5.2} ({:.2} per domain)  \
             forward {:.0}%  mmd {:.0}%  backward {:.0}%  adam {:.0}%  sum+gather {:.0}%",
            format!("K = {k} targets, {sim:?}"),
            t.0,
            t.1,
            t.0 / base.0,
            t.0 / base.0 / (k + 1) as f64,
            share(parts.forward_secs),
            share(parts.similarity_secs),
            share(parts.backward_secs),
            share(parts.update_secs),
            share(parts.exchange_secs),
        );
    }
}
