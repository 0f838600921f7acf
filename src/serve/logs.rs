//! Rank 0's `tracing` output as protocol [`Event::Log`]s: a layer (installed by the binary next to
//! its stderr formatter) that, once `tessera serve` has set a sink, forwards info, warn and error
//! events through a bounded channel (full → dropped, so logging never blocks a rank); lines with
//! the target [`SERVER_ONLY`] stay in the server's log.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::mpsc::SyncSender;

use tracing::field::{Field, Visit};
use tracing::{Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;

use crate::protocol::LogLevel;

/// The `tracing` target of lines for the server's own log only, never sent to clients: what
/// strangers cause (refused handshakes) must not reach, or flood, the clients of others.
pub const SERVER_ONLY: &str = "tessera::serve::door";

/// One log line: level and text.
pub type LogLine = (LogLevel, String);

static SINK: Mutex<Option<SyncSender<LogLine>>> = Mutex::new(None);

/// Where forwarded log lines go from now on.
pub fn set_sink(tx: SyncSender<LogLine>) {
    *SINK.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
}

/// The layer; a no-op until [`set_sink`] is called.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    LogForward.with_filter(tracing_subscriber::filter::LevelFilter::INFO)
}

struct LogForward;

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for LogForward {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() == SERVER_ONLY {
            return;
        }
        let guard = SINK.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = guard.as_ref() else {
            return;
        };
        let level = match *event.metadata().level() {
            Level::ERROR => LogLevel::Error,
            Level::WARN => LogLevel::Warn,
            _ => LogLevel::Info,
        };
        let mut text = Text(String::new());
        event.record(&mut text);
        let _ = tx.try_send((level, text.0));
    }
}
