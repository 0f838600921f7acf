//! Previews for the live view: box-downsampling to the size the view asked for
//! ([`PreviewImage::of_tensor`]), on a worker thread fed by a one-slot mailbox, so a rank never
//! waits for a preview.
//!
//! Rank 0's iteration callback only copies the iterate into the mailbox (a memcpy; the copy it
//! replaces, if the worker has not picked it up yet, is stale and dropped). Images that must all be
//! shown once (ground truth, measurements) go into a small queue beside the slot.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::protocol::{Event, JobId, PreviewImage, PreviewKind, Section};
use crate::tensor::Tensor;

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
    /// Iterate copies the worker is done with, reused so a hand-off is a copy into warm memory.
    spare: std::sync::mpsc::Receiver<Tensor>,
}

impl PreviewWorker {
    /// Starts the thread; `publish` receives each finished `Event::Preview`.
    pub fn start(publish: impl Fn(Event) + Send + 'static) -> PreviewWorker {
        let mailbox: Arc<(Mutex<Mailbox>, Condvar)> = Arc::default();
        let m = mailbox.clone();
        let (spare_tx, spare) = std::sync::mpsc::sync_channel::<Tensor>(1);
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
                    if let Some(image) =
                        PreviewImage::of_tensor(&req.x, Section::default(), req.max_side as usize)
                    {
                        publish(Event::Preview {
                            job: req.job,
                            iteration: req.iteration,
                            what: req.what.clone(),
                            image,
                        });
                    }
                    if req.what == PreviewKind::Reconstruction {
                        let _ = spare_tx.try_send(req.x);
                    }
                }
            })
            .expect("spawning the preview thread");
        PreviewWorker {
            mailbox,
            thread: Some(thread),
            spare,
        }
    }

    /// A copy of `x` for [`PreviewWorker::latest`], made in a recycled buffer when one of the
    /// right shape is free.
    pub fn copy_of(&self, x: &Tensor) -> Tensor {
        match self.spare.try_recv() {
            Ok(mut t) if t.shape() == x.shape() => {
                t.data_mut().copy_from_slice(x.data());
                t
            }
            _ => x.clone(),
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
