//! The workbench protocol's frames: messages round-trip exactly; garbage, truncated and oversized
//! frames are errors, never a panic and never an allocation the bytes on the wire do not justify.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use tessera::protocol::frame::{read_frame, read_message, write_message};
use tessera::protocol::{
    ComponentTimes, Event, InlineArray, InlineFile, IterationReport, LogLevel, MAX_FRAME_BYTES,
    OperatorInfo, PatchMap, PatchTile, PreviewImage, PreviewKind, RankIteration, Request,
};

/// Records the largest single allocation, so a test can check that a lying length prefix does not
/// make the reader allocate what it announces.
struct Largest;
static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Largest = Largest;

fn roundtrip<T>(msg: &T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let mut wire = Vec::new();
    write_message(&mut wire, msg, MAX_FRAME_BYTES).unwrap();
    let mut r = &wire[..];
    let back = read_message(&mut r, MAX_FRAME_BYTES).unwrap().unwrap();
    assert!(r.is_empty(), "the frame was not consumed exactly");
    back
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,24}"
}

fn finite() -> impl Strategy<Value = f64> {
    -1e6f64..1e6
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u32>(), text(), proptest::option::of(text())).prop_map(
            |(protocol, client, token)| {
                Request::Hello {
                    protocol,
                    client,
                    token,
                }
            }
        ),
        (
            text(),
            proptest::collection::vec(
                (
                    text(),
                    proptest::collection::vec(0usize..5, 0..5),
                    proptest::collection::vec(any::<f32>(), 0..40)
                ),
                0..3
            ),
            any::<u32>(),
            proptest::collection::vec(
                (".{0,12}", proptest::collection::vec(any::<u8>(), 0..40)),
                0..3
            )
        )
            .prop_map(
                |(preset_toml, arrays, preview_max_side, files)| Request::Submit {
                    preset_toml,
                    inline: arrays
                        .into_iter()
                        .map(|(name, shape, data)| InlineArray { name, shape, data })
                        .collect(),
                    files: files
                        .into_iter()
                        .map(|(name, bytes)| InlineFile { name, bytes })
                        .collect(),
                    preview_max_side,
                }
            ),
        (text(), ".{0,40}", any::<u32>()).prop_map(|(preset_toml, dir, preview_max_side)| {
            Request::Resume {
                preset_toml,
                run_dir: dir.into(),
                preview_max_side,
            }
        }),
        any::<u64>().prop_map(|job| Request::Cancel { job }),
        Just(Request::Status),
        proptest::option::of(any::<u64>()).prop_map(|job| Request::Attach { job }),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    let report = (
        1usize..1000,
        proptest::option::of(finite()),
        finite(),
        finite(),
    )
        .prop_map(
            |(iteration, psnr_db, relative_change, secs)| IterationReport {
                iteration,
                iterations: iteration + 3,
                psnr_db,
                ssim: None,
                objective: Some(secs * 2.0),
                relative_change,
                times: ComponentTimes {
                    gradient_secs: secs,
                    denoiser_secs: secs / 3.0,
                    other_secs: 0.0,
                    communication_secs: secs / 7.0,
                },
            },
        );
    prop_oneof![
        (
            any::<u64>(),
            report,
            proptest::collection::vec(finite(), 0..4)
        )
            .prop_map(|(job, report, secs)| Event::Iteration {
                job,
                report,
                ranks: secs
                    .iter()
                    .enumerate()
                    .map(|(rank, &s)| RankIteration {
                        rank,
                        gradient_secs: s,
                        denoiser_secs: -s,
                        communication_secs: s * 0.5,
                    })
                    .collect(),
            }),
        (
            any::<u64>(),
            1u32..6,
            1u32..6,
            prop_oneof![Just(1u8), Just(3u8)],
            proptest::option::of(any::<u32>())
        )
            .prop_flat_map(|(job, w, h, c, slice)| {
                proptest::collection::vec(any::<f32>(), (w * h * c as u32) as usize).prop_map(
                    move |pixels| Event::Preview {
                        job,
                        iteration: 7,
                        what: PreviewKind::Measurement(2),
                        image: PreviewImage {
                            width: w,
                            height: h,
                            channels: c,
                            slice,
                            pixels,
                        },
                    },
                )
            }),
        (text(), proptest::option::of(0usize..8)).prop_map(|(message, rank)| Event::Log {
            level: LogLevel::Warn,
            rank,
            message
        }),
        (any::<u64>(), text(), 1usize..9, -50i64..50).prop_map(|(job, name, world, start)| {
            Event::Started {
                job,
                name: name.clone(),
                world_size: world,
                devices: (0..world)
                    .map(|rank| tessera::protocol::RankDevice {
                        rank,
                        host: name.clone(),
                        cpu_threads: 1 + rank,
                    })
                    .collect(),
                image_shape: vec![1, 3, 64, 48],
                operators: vec![OperatorInfo {
                    name: "blur".into(),
                    rank: world - 1,
                }],
                iterations: 30,
                patch_map: Some(PatchMap {
                    spatial: vec![64, 48],
                    tiles: vec![PatchTile {
                        window: vec![(start, 32), (start - 1, 16)],
                        region: vec![(0, 32), (16, 16)],
                        rank: 0,
                    }],
                }),
            }
        }),
        (
            any::<u64>(),
            proptest::collection::vec(0usize..8, 0..3),
            proptest::collection::vec(proptest::option::of(0usize..8), 1..4),
            0usize..1000,
        )
            .prop_map(|(job, lost_ranks, previous_ranks, resumed_from)| {
                Event::Regrouped {
                    job,
                    generation: lost_ranks.len() as u32 + 1,
                    lost_ranks,
                    operators: vec![OperatorInfo {
                        name: "blur 1".into(),
                        rank: previous_ranks.len() - 1,
                    }],
                    previous_ranks,
                    resumed_from,
                    patch_map: Some(PatchMap {
                        spatial: vec![64, 48],
                        tiles: vec![PatchTile {
                            window: vec![(-4, 40), (0, 24)],
                            region: vec![(0, 32), (0, 24)],
                            rank: 0,
                        }],
                    }),
                }
            }),
        (proptest::option::of(any::<u64>()), text())
            .prop_map(|(job, error)| Event::Failed { job, error }),
        (any::<u64>(), text()).prop_map(|(job, s)| Event::Finished {
            job,
            run_dir: PathBuf::from("/out/20250101-000000-quick-1"),
            outputs: vec![PathBuf::from(&s), PathBuf::from("metrics.json")],
            summary_json: s,
        }),
        (
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(job, offset, data)| Event::File {
                job,
                file: "reconstruction.npy".into(),
                offset,
                total: offset + data.len() as u64,
                data,
            }),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip(r in request()) {
        // NaN != NaN, so compare the encodings of the decoded message too.
        let back = roundtrip(&r);
        prop_assert_eq!(
            tessera::protocol::frame::encode(&back).unwrap(),
            tessera::protocol::frame::encode(&r).unwrap()
        );
    }

    #[test]
    fn events_round_trip(e in event()) {
        let back = roundtrip(&e);
        prop_assert_eq!(
            tessera::protocol::frame::encode(&back).unwrap(),
            tessera::protocol::frame::encode(&e).unwrap()
        );
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut r = &bytes[..];
        let _ = read_message::<Request>(&mut r, MAX_FRAME_BYTES);
        let mut r = &bytes[..];
        let _ = read_message::<Event>(&mut r, MAX_FRAME_BYTES);
        // Garbage as a whole payload, behind a correct length prefix.
        let _ = tessera::protocol::frame::decode::<Request>(&bytes);
        let _ = tessera::protocol::frame::decode::<Event>(&bytes);
    }

    #[test]
    fn every_truncation_is_an_error(e in event(), cut in any::<prop::sample::Index>()) {
        let mut wire = Vec::new();
        write_message(&mut wire, &e, MAX_FRAME_BYTES).unwrap();
        let keep = 1 + cut.index(wire.len() - 1); // 1 ..= len-1 bytes
        let mut r = &wire[..keep];
        prop_assert!(read_message::<Event>(&mut r, MAX_FRAME_BYTES).is_err());
    }
}

#[test]
fn a_lying_length_costs_only_the_bytes_that_arrive() {
    // 200 MiB announced (below the limit), ten bytes sent: the reader must fail on the short stream
    // without ever holding a 200 MiB buffer.
    let mut wire = (200u32 << 20).to_le_bytes().to_vec();
    wire.extend([7u8; 10]);
    LARGEST.store(0, Ordering::Relaxed);
    let err = read_frame(&mut &wire[..], MAX_FRAME_BYTES).unwrap_err();
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(err.to_string().contains("after 10 of"), "{err}");
    // Other tests allocate concurrently, but nothing near this size.
    assert!(largest < 16 << 20, "largest allocation {largest} bytes");
}

#[test]
fn a_lying_sequence_length_inside_a_frame_is_an_error() {
    // Submit { preset_toml: "", inline: [ InlineArray { name: "", shape: [], data: <2^40 floats> } ] }
    // encoded by hand: variant 1, empty string, one array, empty name, empty shape, a huge varint.
    let mut payload = vec![1u8, 0, 1, 0, 0];
    payload.extend([0x80, 0x80, 0x80, 0x80, 0x80, 0x20]); // 2^40 as a varint
    payload.extend([0u8; 16]);
    LARGEST.store(0, Ordering::Relaxed);
    assert!(tessera::protocol::frame::decode::<Request>(&payload).is_err());
    assert!(LARGEST.load(Ordering::Relaxed) < 16 << 20);
}

#[test]
fn an_oversized_frame_is_refused_by_both_ends() {
    let mut wire = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes().to_vec();
    wire.extend([0u8; 64]);
    let err = read_frame(&mut &wire[..], MAX_FRAME_BYTES).unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
    let big = Request::Submit {
        preset_toml: String::new(),
        inline: vec![InlineArray {
            name: "image".into(),
            shape: vec![1, 1, 100, 101],
            data: vec![0.0; 100 * 101],
        }],
        files: Vec::new(),
        preview_max_side: 64,
    };
    let err = write_message(&mut Vec::new(), &big, 1000).unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
}

#[test]
fn several_frames_on_one_stream_come_back_in_order_then_a_clean_end() {
    let mut wire = Vec::new();
    for job in 0..5u64 {
        write_message(&mut wire, &Request::Cancel { job }, MAX_FRAME_BYTES).unwrap();
    }
    let mut r = &wire[..];
    for job in 0..5u64 {
        assert_eq!(
            read_message::<Request>(&mut r, MAX_FRAME_BYTES).unwrap(),
            Some(Request::Cancel { job })
        );
    }
    assert_eq!(
        read_message::<Request>(&mut r, MAX_FRAME_BYTES).unwrap(),
        None
    );
}

/// Golden bytes: every [`Request`] and [`Event`] variant, built from a fixed example, encoded as
/// postcard and compared with the bytes recorded for [`GOLDEN_VERSION`]. postcard is not
/// self-describing, so a renamed type is harmless but a new, removed or reordered field or variant
/// changes the bytes, and a client of the old version would misread them mid-stream instead of
/// being refused at the handshake.
mod golden {
    use std::path::PathBuf;

    use tessera::protocol::{
        ComponentTimes, DomainLosses, DsnEpochReport, EpochReport, Event, InlineArray, InlineFile,
        IterationReport, LogLevel, LossPoint, OperatorInfo, PROTOCOL_VERSION, PatchMap, PatchTile,
        PreviewImage, PreviewKind, RankDevice, RankEpoch, RankIteration, Request, Shot, SocketKind,
        TrainPlan, Transport,
    };

    /// The protocol version the hex strings below were recorded for.
    const GOLDEN_VERSION: u32 = 7;

    const BUMP: &str = "bump PROTOCOL_VERSION and update the golden bytes";

    /// The name of a request's variant; exhaustive, so a new variant does not compile until it is
    /// named here (and then [`requests`] must hold an example of it: see
    /// `the_examples_cover_every_variant`).
    fn request_name(r: &Request) -> &'static str {
        match r {
            Request::Hello { .. } => "Hello",
            Request::Submit { .. } => "Submit",
            Request::Resume { .. } => "Resume",
            Request::Cancel { .. } => "Cancel",
            Request::Status => "Status",
            Request::Attach { .. } => "Attach",
            Request::Fetch { .. } => "Fetch",
        }
    }

    fn event_name(e: &Event) -> &'static str {
        match e {
            Event::Welcome { .. } => "Welcome",
            Event::Refused { .. } => "Refused",
            Event::Accepted { .. } => "Accepted",
            Event::Started { .. } => "Started",
            Event::FwiStarted { .. } => "FwiStarted",
            Event::FwiEpoch { .. } => "FwiEpoch",
            Event::TrainStarted { .. } => "TrainStarted",
            Event::TrainStep { .. } => "TrainStep",
            Event::DsnEpoch { .. } => "DsnEpoch",
            Event::Iteration { .. } => "Iteration",
            Event::Preview { .. } => "Preview",
            Event::Log { .. } => "Log",
            Event::Finished { .. } => "Finished",
            Event::Cancelled { .. } => "Cancelled",
            Event::Failed { .. } => "Failed",
            Event::File { .. } => "File",
            Event::FetchFailed { .. } => "FetchFailed",
            Event::Status { .. } => "Status",
            Event::Regrouped { .. } => "Regrouped",
        }
    }

    /// One example of each request, in declaration order; every optional field set and every
    /// list non-empty, so each field shows in the bytes.
    fn requests() -> Vec<Request> {
        vec![
            Request::Hello {
                protocol: 6,
                client: "tessera-gui 0.1.0".into(),
                token: Some("s3cret".into()),
            },
            Request::Submit {
                preset_toml: "version = 1\n".into(),
                inline: vec![InlineArray {
                    name: "image".into(),
                    shape: vec![1, 1, 2, 2],
                    data: vec![0.25, -1.5, 3.0, 1e-3],
                }],
                files: vec![InlineFile {
                    name: "vp.npy".into(),
                    bytes: vec![0x93, b'N', 0],
                }],
                preview_max_side: 512,
            },
            Request::Resume {
                preset_toml: "[train]\n".into(),
                run_dir: PathBuf::from("/out/20250101-000000-train-1"),
                preview_max_side: 300,
            },
            Request::Cancel { job: 300 },
            Request::Status,
            Request::Attach { job: Some(7) },
            Request::Fetch {
                job: 2,
                file: "metrics.json".into(),
                offset: 1 << 22,
            },
        ]
    }

    fn devices() -> Vec<RankDevice> {
        vec![
            RankDevice {
                rank: 0,
                host: "node1".into(),
                cpu_threads: 4,
            },
            RankDevice {
                rank: 1,
                host: "node2".into(),
                cpu_threads: 130,
            },
        ]
    }

    /// One example of each event, in declaration order (as [`requests`]).
    fn events() -> Vec<Event> {
        vec![
            Event::Welcome {
                protocol: 6,
                server: "tessera 0.1.0".into(),
                world_size: 2,
                devices: devices(),
                backend: Transport::Sockets(SocketKind::Tcp),
            },
            Event::Refused {
                reason: "wrong token".into(),
            },
            Event::Accepted { job: 1 },
            Event::Started {
                job: 1,
                name: "quick".into(),
                world_size: 2,
                devices: devices(),
                image_shape: vec![1, 3, 64, 48],
                operators: vec![OperatorInfo {
                    name: "blur".into(),
                    rank: 1,
                }],
                iterations: 30,
                patch_map: Some(PatchMap {
                    spatial: vec![64, 48],
                    tiles: vec![PatchTile {
                        window: vec![(-4, 40), (0, 24)],
                        region: vec![(0, 32), (0, 24)],
                        rank: 1,
                    }],
                }),
            },
            Event::FwiStarted {
                job: 3,
                name: "fwi_marmousi".into(),
                world_size: 2,
                devices: devices(),
                model_shape: [94, 288],
                spacing_m: [10.0, 12.5],
                shots: vec![Shot {
                    sources: vec![[1, 2]],
                    receivers: vec![[1, 0], [1, 287]],
                }],
                epochs: 20,
                step_ratio: 3,
            },
            Event::FwiEpoch {
                job: 3,
                report: EpochReport {
                    epoch: 2,
                    epochs: 20,
                    loss: 0.125,
                    model_error: Some(0.0625),
                    cutoff_hz: Some(5.0),
                    batch: vec![4, 1],
                    ranks: vec![RankEpoch {
                        rank: 1,
                        shots: vec![1],
                        forward_secs: 0.5,
                        adjoint_secs: 0.75,
                        communication_secs: 0.03125,
                    }],
                    secs: 1.5,
                },
            },
            Event::TrainStarted {
                job: 4,
                name: "train-dncnn".into(),
                world_size: 2,
                devices: devices(),
                plan: TrainPlan::Dsn {
                    domains: vec!["source".into(), "blurred".into()],
                    epochs: 5,
                    steps_per_epoch: 40,
                    similarity: "mmd".into(),
                },
            },
            Event::TrainStep {
                job: 4,
                point: LossPoint {
                    step: 99,
                    loss: 0.00390625,
                },
            },
            Event::DsnEpoch {
                job: 4,
                report: DsnEpochReport {
                    epoch: 1,
                    losses: vec![DomainLosses {
                        task: 1.0,
                        reconstruction: 0.5,
                        difference: 0.25,
                        similarity: 0.125,
                    }],
                    accuracy: vec![0.75, 0.5],
                    target_accuracy: 0.5,
                },
            },
            Event::Iteration {
                job: 1,
                report: IterationReport {
                    iteration: 3,
                    iterations: 30,
                    psnr_db: Some(27.5),
                    ssim: Some(0.875),
                    objective: Some(12.0),
                    relative_change: 0.01,
                    times: ComponentTimes {
                        gradient_secs: 0.25,
                        denoiser_secs: 0.5,
                        other_secs: 0.0625,
                        communication_secs: 0.125,
                    },
                },
                ranks: vec![RankIteration {
                    rank: 1,
                    gradient_secs: 0.25,
                    denoiser_secs: 0.5,
                    communication_secs: 0.125,
                }],
            },
            Event::Preview {
                job: 1,
                iteration: 3,
                what: PreviewKind::Measurement(2),
                image: PreviewImage {
                    width: 2,
                    height: 1,
                    channels: 1,
                    slice: Some(5),
                    pixels: vec![0.5, -0.5],
                },
            },
            Event::Log {
                level: LogLevel::Warn,
                rank: Some(1),
                message: "slow rank".into(),
            },
            Event::Finished {
                job: 1,
                run_dir: PathBuf::from("/out/20250101-000000-quick-1"),
                outputs: vec![
                    PathBuf::from("reconstruction.npy"),
                    PathBuf::from("metrics.json"),
                ],
                summary_json: "{}".into(),
            },
            Event::Cancelled {
                job: 2,
                iterations: 4,
                run_dir: Some(PathBuf::from("/out/x")),
                outputs: vec![PathBuf::from("metrics.json")],
                summary_json: Some("{\"a\":1}".into()),
            },
            Event::Failed {
                job: Some(2),
                error: "rank 1 lost".into(),
            },
            Event::File {
                job: 1,
                file: "metrics.json".into(),
                offset: 4,
                total: 6,
                data: vec![b'{', b'}'],
            },
            Event::FetchFailed {
                job: 1,
                file: "nope.npy".into(),
                error: "no such output".into(),
            },
            Event::Status {
                world_size: 2,
                running: Some(5),
                done: vec![1, 2, 3],
            },
            Event::Regrouped {
                job: 5,
                generation: 1,
                lost_ranks: vec![1],
                previous_ranks: vec![Some(0), Some(2), None],
                resumed_from: 7,
                operators: vec![OperatorInfo {
                    name: "blur 1".into(),
                    rank: 2,
                }],
                patch_map: Some(PatchMap {
                    spatial: vec![64, 48],
                    tiles: vec![PatchTile {
                        window: vec![(-4, 40), (0, 24)],
                        region: vec![(0, 32), (0, 24)],
                        rank: 1,
                    }],
                }),
            },
        ]
    }

    const GOLDEN_REQUESTS: &[(&str, &str)] = &[
        (
            "Hello",
            "000611746573736572612d67756920302e312e300106733363726574",
        ),
        (
            "Submit",
            concat!(
                "010c76657273696f6e203d20310a0105696d6167650401010202040000803e0000c0bf000040406f",
                "12833a010676702e6e707903934e008004",
            ),
        ),
        (
            "Resume",
            concat!(
                "02085b747261696e5d0a1c2f6f75742f32303235303130312d3030303030302d747261696e2d31ac",
                "02",
            ),
        ),
        ("Cancel", "03ac02"),
        ("Status", "04"),
        ("Attach", "050107"),
        ("Fetch", "06020c6d6574726963732e6a736f6e80808002"),
    ];

    const GOLDEN_EVENTS: &[(&str, &str)] = &[
        (
            "Welcome",
            "00060d7465737365726120302e312e30020200056e6f6465310401056e6f64653282010101",
        ),
        ("Refused", "010b77726f6e6720746f6b656e"),
        ("Accepted", "0201"),
        (
            "Started",
            concat!(
                "030105717569636b020200056e6f6465310401056e6f646532820104010340300104626c7572011e",
                "01024030010207280018020020001801",
            ),
        ),
        (
            "FwiStarted",
            concat!(
                "04030c6677695f6d61726d6f757369020200056e6f6465310401056e6f64653282015ea002000000",
                "0000002440000000000000294001010102020100019f021403",
            ),
        ),
        (
            "FwiEpoch",
            concat!(
                "05030214000000000000c03f01000000000000b03f01000000000000144002040101010101000000",
                "000000e03f000000000000e83f000000000000a03f000000000000f83f",
            ),
        ),
        (
            "TrainStarted",
            concat!(
                "06040b747261696e2d646e636e6e020200056e6f6465310401056e6f6465328201010206736f7572",
                "636507626c75727265640528036d6d64",
            ),
        ),
        ("TrainStep", "070463000000000000703f"),
        (
            "DsnEpoch",
            concat!(
                "08040101000000000000f03f000000000000e03f000000000000d03f000000000000c03f02000000",
                "000000e83f000000000000e03f000000000000e03f",
            ),
        ),
        (
            "Iteration",
            concat!(
                "0901031e010000000000803b4001000000000000ec3f0100000000000028407b14ae47e17a843f00",
                "0000000000d03f000000000000e03f000000000000b03f000000000000c03f0101000000000000d0",
                "3f000000000000e03f000000000000c03f",
            ),
        ),
        ("Preview", "0a010302020201010105020000003f000000bf"),
        ("Log", "0b01010109736c6f772072616e6b"),
        (
            "Finished",
            concat!(
                "0c011c2f6f75742f32303235303130312d3030303030302d717569636b2d3102127265636f6e7374",
                "72756374696f6e2e6e70790c6d6574726963732e6a736f6e027b7d",
            ),
        ),
        (
            "Cancelled",
            "0d020401062f6f75742f78010c6d6574726963732e6a736f6e01077b2261223a317d",
        ),
        ("Failed", "0e01020b72616e6b2031206c6f7374"),
        ("File", "0f010c6d6574726963732e6a736f6e0406027b7d"),
        (
            "FetchFailed",
            "1001086e6f70652e6e70790e6e6f2073756368206f7574707574",
        ),
        ("Status", "1102010503010203"),
        (
            "Regrouped",
            "1205010101030100010200070106626c757220310201024030010207280018020020001801",
        ),
    ];

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Compares each example's bytes with its golden hex; one message lists every difference.
    fn check<T: serde::Serialize>(
        kind: &str,
        examples: &[T],
        name: fn(&T) -> &'static str,
        golden: &[(&str, &str)],
    ) {
        assert_eq!(
            PROTOCOL_VERSION, GOLDEN_VERSION,
            "PROTOCOL_VERSION is {PROTOCOL_VERSION} but the golden bytes are those of version \
             {GOLDEN_VERSION}: update the golden bytes and GOLDEN_VERSION"
        );
        let mut wrong = Vec::new();
        for example in examples {
            let variant = name(example);
            let got = hex(&postcard::to_allocvec(example).unwrap());
            match golden.iter().find(|(n, _)| *n == variant) {
                Some((_, want)) if *want == got => {}
                Some((_, want)) => wrong.push(format!(
                    "{kind}::{variant} changed:\n    want {want}\n    got  {got}"
                )),
                None => wrong.push(format!(
                    "{kind}::{variant} has no golden bytes:\n    (\"{variant}\", \"{got}\"),"
                )),
            }
        }
        assert!(
            wrong.is_empty(),
            "the postcard bytes of protocol version {PROTOCOL_VERSION} changed ({BUMP}):\n{}",
            wrong.join("\n")
        );
        assert_eq!(
            golden.len(),
            examples.len(),
            "golden {kind} bytes of a variant that no longer exists ({BUMP})"
        );
    }

    #[test]
    fn every_request_keeps_its_bytes() {
        check("Request", &requests(), request_name, GOLDEN_REQUESTS);
    }

    #[test]
    fn every_event_keeps_its_bytes() {
        check("Event", &events(), event_name, GOLDEN_EVENTS);
    }

    /// postcard writes a variant as its index (a varint), then its fields. The examples must be
    /// the variants 0, 1, … in order, and the index after the last must not decode: then an added
    /// variant, wherever it is declared, leaves one uncovered and fails here.
    fn covers_every_variant<T: serde::Serialize + serde::de::DeserializeOwned>(
        kind: &str,
        examples: &[T],
    ) {
        for (i, example) in examples.iter().enumerate() {
            let bytes = postcard::to_allocvec(example).unwrap();
            assert_eq!(
                bytes[0] as usize, i,
                "{kind} example {i} is variant {}: keep one example per variant, in order",
                bytes[0]
            );
        }
        // Zeros decode as empty strings and lists, `None`, 0 and the first variant of any enum, so
        // a real variant at this index would decode.
        let mut next = vec![examples.len() as u8];
        next.extend([0u8; 64]);
        assert!(
            postcard::from_bytes::<T>(&next).is_err(),
            "{kind} has a variant {} without an example and golden bytes ({BUMP})",
            examples.len()
        );
        let mut last = vec![examples.len() as u8 - 1];
        last.extend([0u8; 64]);
        assert!(
            postcard::from_bytes::<T>(&last).is_ok(),
            "zeros after a variant index should decode (the check above relies on it)"
        );
    }

    #[test]
    fn the_examples_cover_every_variant() {
        covers_every_variant("Request", &requests());
        covers_every_variant("Event", &events());
    }
}
