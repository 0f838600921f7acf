//! Previews for the live view: box-downsampling to the size the view asked for, on a worker thread
//! fed by a one-slot mailbox, so a rank never waits for a preview.
//!
//! Rank 0's iteration callback only copies the iterate into the mailbox (a memcpy; the copy it
//! replaces, if the worker has not picked it up yet, is stale and dropped). Images that must all be
//! shown once (ground truth, measurements) go into a small queue beside the slot.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::protocol::{Event, JobId, PreviewImage, PreviewKind};
use crate::tensor::Tensor;

/// The image shown for `x`: batch element 0, channels 0..3 when it has three (else channel 0), the
/// central depth slice of a volume; box-averaged by an integer factor so that neither side exceeds
/// `max_side`. `None` for arrays that are not images or volumes.
pub fn preview_image(x: &Tensor, max_side: u32) -> Option<PreviewImage> {
    let shape = x.shape();
    let (c, d, h, w) = match *shape {
        [_, c, h, w] => (c, 1, h, w),
        [_, c, d, h, w] => (c, d, h, w),
        _ => return None,
    };
    if c == 0 || h == 0 || w == 0 || d == 0 {
        return None;
    }
    let slice = d / 2;
    let channels = if c == 3 { 3 } else { 1 };
    let factor = h.max(w).div_ceil(max_side.max(1) as usize).max(1);
    let (out_h, out_w) = (h.div_ceil(factor), w.div_ceil(factor));
    let data = x.data();
    let plane = |ci: usize| {
        let start = (ci * d + slice) * h * w;
        &data[start..start + h * w]
    };
    let mut pixels = vec![0f32; out_h * out_w * channels];
    for ci in 0..channels {
        let p = plane(ci);
        for oy in 0..out_h {
            let ys = oy * factor..((oy + 1) * factor).min(h);
            for ox in 0..out_w {
                let xs = ox * factor..((ox + 1) * factor).min(w);
                let mut sum = 0f64;
                for y in ys.clone() {
                    sum += p[y * w + xs.start..y * w + xs.end]
                        .iter()
                        .map(|&v| v as f64)
                        .sum::<f64>();
                }
                let n = ys.len() * xs.len();
                pixels[(oy * out_w + ox) * channels + ci] = (sum / n as f64) as f32;
            }
        }
    }
    Some(PreviewImage {
        width: out_w as u32,
        height: out_h as u32,
        channels: channels as u8,
        slice: (shape.len() == 5).then_some(slice as u32),
        pixels,
    })
}

/// One image waiting to be previewed.
pub struct PreviewRequest {
    pub job: JobId,
    pub iteration: usize,
    pub what: PreviewKind,
    pub x: Tensor,
    pub max_side: u32,
}

#[derive(Default)]
struct Mailbox {
    once: VecDeque<PreviewRequest>,
    latest: Option<PreviewRequest>,
    closed: bool,
}

/// The preview thread and its mailbox.
pub struct PreviewWorker {
    mailbox: Arc<(Mutex<Mailbox>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl PreviewWorker {
    /// Starts the thread; `publish` receives each finished `Event::Preview`.
    pub fn start(publish: impl Fn(Event) + Send + 'static) -> PreviewWorker {
        let mailbox: Arc<(Mutex<Mailbox>, Condvar)> = Arc::default();
        let m = mailbox.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-preview".into())
            .spawn(move || {
                loop {
                    let req = {
                        let (lock, cv) = &*m;
                        let mut b = lock.lock().unwrap_or_else(|p| p.into_inner());
                        loop {
                            if let Some(r) = b.once.pop_front().or_else(|| b.latest.take()) {
                                break r;
                            }
                            if b.closed {
                                return;
                            }
                            b = cv.wait(b).unwrap_or_else(|p| p.into_inner());
                        }
                    };
                    if let Some(image) = preview_image(&req.x, req.max_side) {
                        publish(Event::Preview {
                            job: req.job,
                            iteration: req.iteration,
                            what: req.what,
                            image,
                        });
                    }
                }
            })
            .expect("spawning the preview thread");
        PreviewWorker {
            mailbox,
            thread: Some(thread),
        }
    }

    /// Queues an image that must be previewed (ground truth, a measurement).
    pub fn once(&self, req: PreviewRequest) {
        let (lock, cv) = &*self.mailbox;
        lock.lock()
            .unwrap_or_else(|p| p.into_inner())
            .once
            .push_back(req);
        cv.notify_one();
    }

    /// Offers the newest iterate; an older one still waiting is dropped.
    pub fn latest(&self, req: PreviewRequest) {
        let (lock, cv) = &*self.mailbox;
        lock.lock().unwrap_or_else(|p| p.into_inner()).latest = Some(req);
        cv.notify_one();
    }
}

impl Drop for PreviewWorker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.mailbox;
        lock.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_downsampling_averages_blocks_and_keeps_colour_interleaved() {
        // 1×3×4×6, channel c at (y, x) = 100c + 10y + x; factor 2 (max side 3).
        let x = Tensor::from_fn(&[1, 3, 4, 6], |i| {
            let (c, y, xx) = (i / 24, (i / 6) % 4, i % 6);
            (100 * c + 10 * y + xx) as f32
        });
        let p = preview_image(&x, 3).unwrap();
        assert_eq!((p.width, p.height, p.channels, p.slice), (3, 2, 3, None));
        // Block (0,0) of channel 1: mean of 100 + {0,1,10,11} = 105.5.
        assert_eq!(p.pixels[1], 105.5);
        // Block (1,2) of channel 2: 200 + mean{24,25,34,35} = 229.5.
        assert_eq!(p.pixels[(3 + 2) * 3 + 2], 229.5);
    }

    #[test]
    fn a_volume_shows_its_central_slice_and_edges_are_partial_blocks() {
        let x = Tensor::from_fn(&[1, 1, 5, 3, 3], |i| (i / 9) as f32); // value = depth index
        let p = preview_image(&x, 2).unwrap();
        assert_eq!((p.width, p.height, p.channels, p.slice), (2, 2, 1, Some(2)));
        assert!(p.pixels.iter().all(|&v| v == 2.0));
        assert!(preview_image(&Tensor::zeros(&[4, 4]), 8).is_none());
        // Two channels: not colour, so channel 0 alone.
        let two = preview_image(&Tensor::full(&[1, 2, 2, 2], 1.0), 8).unwrap();
        assert_eq!((two.channels, two.pixels.len()), (1, 4));
    }
}
