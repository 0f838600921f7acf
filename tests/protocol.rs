//! The workbench protocol's frames: messages round-trip exactly; garbage, truncated and oversized
//! frames are errors, never a panic and never an allocation the bytes on the wire do not justify.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use tessera::optim::{ComponentTimes, IterationReport};
use tessera::protocol::frame::{read_frame, read_message, write_message};
use tessera::protocol::{
    Event, InlineArray, InlineFile, LogLevel, MAX_FRAME_BYTES, OperatorInfo, PatchMap, PatchTile,
    PreviewImage, PreviewKind, RankIteration, Request,
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
