//! A TCP relay that holds every byte for a fixed one-way latency in each direction: the link
//! latency of the network-namespace rehearsal (`scripts/netns-hosts.sh --delay`) on kernels
//! without `sch_netem`. It stands beside the process group, not in it: ranks dial the addresses
//! they always dial and the rehearsal's routing brings their connections here
//! (docs/DISTRIBUTED.md, "Multi-host rehearsal").
//!
//! Each direction of a relayed connection is a reader and a writer joined by a bounded queue: the
//! reader stamps each chunk with its arrival time and reads on, the writer sends each chunk
//! `delay` after it arrived. Chunks in flight are pipelined as on a real link of that latency, so
//! the stream's throughput is kept and only its arrival times move; an end of stream (a
//! half-close) travels the same way, after the last chunk, and a failed side closes the other.
//! Connection set-up is not delayed. The relay accepts a client before its target does (the
//! kernel completes the handshake), so a target that refuses is dialled again for up to
//! [`Link::connect_window`] while the client waits, as a rank started before rank 0's store
//! would have retried on its own; past that the client's connection is closed. At most [`QUEUE_CHUNKS`] chunks of up to [`CHUNK_BYTES`]
//! wait in one direction; past that the reader stops reading and TCP's flow control holds the
//! sender, as a full link would.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Largest chunk read at once.
pub const CHUNK_BYTES: usize = 64 << 10;
/// Chunks that may wait in one direction of one connection (64 MiB of full chunks, more than the
/// bandwidth-delay product of any link the rehearsal makes).
pub const QUEUE_CHUNKS: usize = 1024;
/// Longest wait for one attempt to dial a connection's target.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the relay does with each connection: where it goes, how long its bytes wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub target: Target,
    /// One-way delay, each direction.
    pub delay: Duration,
    /// How long a target that refuses is dialled again before the client is given up.
    pub connect_window: Duration,
}

impl Link {
    /// A link with a 30 s connect window (the rendezvous store's own patience is longer).
    pub fn new(target: Target, delay: Duration) -> Link {
        Link {
            target,
            delay,
            connect_window: Duration::from_secs(30),
        }
    }
}

/// Where a relayed connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Every connection to this address.
    Fixed(SocketAddr),
    /// The address the client dialled (the relay's own end of the connection, which the
    /// rehearsal's routing made local to the relay) moved into another IPv4 network: the host
    /// bits and the port are kept, e.g. 10.213.0.3:20012 → 10.213.1.3:20012 for 10.213.1.0/24.
    SameHostIn { network: Ipv4Addr, prefix_len: u8 },
}

impl Target {
    /// Parses `A.B.C.D/N` for [`Target::SameHostIn`].
    pub fn parse_network(s: &str) -> Result<Target> {
        let bad = |why: &str| Error::config("--to-net", format!("`{s}`: {why}"));
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| bad("expected an IPv4 network A.B.C.D/N"))?;
        let network: Ipv4Addr = ip.parse().map_err(|_| bad("not an IPv4 address"))?;
        let prefix_len: u8 = len
            .parse()
            .ok()
            .filter(|n| (1..=31).contains(n))
            .ok_or_else(|| bad("the prefix length must be 1..=31"))?;
        Ok(Target::SameHostIn {
            network,
            prefix_len,
        })
    }

    /// The address a connection that dialled `dialled` is relayed to.
    pub fn resolve(&self, dialled: SocketAddr) -> std::io::Result<SocketAddr> {
        match *self {
            Target::Fixed(a) => Ok(a),
            Target::SameHostIn {
                network,
                prefix_len,
            } => {
                let SocketAddr::V4(d) = dialled else {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!(
                            "{dialled} is not IPv4: cannot move it into {network}/{prefix_len}"
                        ),
                    ));
                };
                let mask = u32::MAX << (32 - u32::from(prefix_len));
                let ip = (u32::from(network) & mask) | (u32::from(*d.ip()) & !mask);
                Ok(SocketAddr::V4(SocketAddrV4::new(ip.into(), d.port())))
            }
        }
    }
}

/// Parses a one-way delay in tc's units: a number followed by `s`, `ms` or `us` (`sec`, `msec`,
/// `usec` too), e.g. `1ms`, `0.1ms`, `100us`; `0` alone is no delay.
pub fn parse_delay(s: &str) -> Result<Duration> {
    let bad = |why: String| Error::config("--delay", format!("`{s}`: {why}"));
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| bad("give a unit: s, ms or us (e.g. 1ms)".into()))?;
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| bad(format!("`{number}` is not a number")))?;
    let secs_per_unit = match unit {
        "s" | "sec" | "secs" => 1.0,
        "ms" | "msec" | "msecs" => 1e-3,
        "us" | "usec" | "usecs" => 1e-6,
        other => return Err(bad(format!("unknown unit `{other}` (s, ms or us)"))),
    };
    let secs = value * secs_per_unit;
    if !(0.0..=60.0).contains(&secs) {
        return Err(bad("the delay must be between 0 and 60 s".into()));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a listening address `IP:PORT` or a range of ports `IP:FIRST-LAST` (at most 4096).
pub fn parse_listen(s: &str) -> Result<Vec<SocketAddr>> {
    let bad = |why: &str| Error::config("--listen", format!("`{s}`: {why}"));
    let (ip, ports) = s
        .rsplit_once(':')
        .ok_or_else(|| bad("expected IP:PORT or IP:FIRST-LAST"))?;
    let ip: std::net::IpAddr = ip
        .trim_matches(|c| c == '[' || c == ']')
        .parse()
        .map_err(|_| bad("not an IP address"))?;
    let port = |p: &str| p.parse::<u16>().map_err(|_| bad("a port is 0..=65535"));
    let (first, last) = match ports.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => (port(ports)?, port(ports)?),
    };
    if first > last || usize::from(last - first) >= 4096 {
        return Err(bad(
            "a port range is FIRST-LAST with FIRST <= LAST, at most 4096 ports",
        ));
    }
    Ok((first..=last).map(|p| SocketAddr::new(ip, p)).collect())
}

/// What the relay saw of one connection.
#[derive(Debug)]
pub enum RelayEvent {
    /// A client connected and its target accepted.
    Opened {
        client: SocketAddr,
        dialled: SocketAddr,
        target: SocketAddr,
    },
    /// A connection ended: both directions closed, or one failed (`error`, the first failure).
    Closed(ConnectionReport),
}

/// One relayed connection, at its end.
#[derive(Debug)]
pub struct ConnectionReport {
    pub client: SocketAddr,
    pub dialled: SocketAddr,
    /// `None` when no target could be worked out.
    pub target: Option<SocketAddr>,
    /// Bytes delivered to the target and to the client.
    pub bytes_to_target: u64,
    pub bytes_to_client: u64,
    /// Most chunks held at once in either direction (above 1: the link was pipelined).
    pub max_chunks_in_flight: usize,
    /// Why the connection ended early: which side, which address, what happened.
    pub error: Option<String>,
}

/// A running relay: one accepting thread per listening address, threads per connection. Dropping
/// it stops accepting; connections already relayed run to their end.
pub struct Relay {
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    events: Receiver<RelayEvent>,
}

impl Relay {
    /// Listens on every address of `listen` and relays what arrives as `link` says. Fails naming
    /// the first address it cannot listen on.
    pub fn start(listen: &[SocketAddr], link: Link) -> Result<Relay> {
        if listen.is_empty() {
            return Err(Error::config("--listen", "no address to listen on"));
        }
        let listeners = listen
            .iter()
            .map(|a| {
                TcpListener::bind(a).map_err(|e| Error::Comm {
                    context: format!("relay: listening on {a}"),
                    source: e,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let addrs = listeners
            .iter()
            .map(|l| l.local_addr())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::Comm {
                context: "relay: reading a listening address".into(),
                source: e,
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, events) = channel();
        for listener in listeners {
            let (stop, tx) = (stop.clone(), tx.clone());
            std::thread::Builder::new()
                .name("relay-accept".into())
                .spawn(move || accept_loop(listener, link, &stop, tx))
                .map_err(|e| Error::Comm {
                    context: "relay: starting a thread".into(),
                    source: e,
                })?;
        }
        Ok(Relay {
            addrs,
            stop,
            events,
        })
    }

    /// The addresses it listens on (ports resolved where 0 was asked for).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The next connection event, waiting at most `timeout` (`None`: nothing happened).
    pub fn next_event(&self, timeout: Duration) -> Option<RelayEvent> {
        self.events.recv_timeout(timeout).ok()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake each accepting thread, which then sees `stop`.
        for a in &self.addrs {
            let wake = match a.ip().is_unspecified() {
                true => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), a.port()),
                false => *a,
            };
            let _ = TcpStream::connect_timeout(&wake, Duration::from_millis(200));
        }
    }
}

fn accept_loop(listener: TcpListener, link: Link, stop: &AtomicBool, events: Sender<RelayEvent>) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((client, _)) => {
                let events = events.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("relay-conn".into())
                        .spawn(move || {
                            let report = relay_connection(client, link, &events);
                            let _ = events.send(RelayEvent::Closed(report));
                        });
                if let Err(e) = spawned {
                    tracing::error!("relay: cannot start a connection's thread: {e}");
                }
            }
            Err(e) => {
                // Out of descriptors and the like: the listener itself stays usable.
                tracing::warn!("relay: accepting a connection failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Relays one accepted connection to its target until both directions have ended or one failed.
fn relay_connection(
    client: TcpStream,
    link: Link,
    events: &Sender<RelayEvent>,
) -> ConnectionReport {
    let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
    let mut report = ConnectionReport {
        client: client.peer_addr().unwrap_or(unknown),
        dialled: client.local_addr().unwrap_or(unknown),
        target: None,
        bytes_to_target: 0,
        bytes_to_client: 0,
        max_chunks_in_flight: 0,
        error: None,
    };
    let to = match link.target.resolve(report.dialled) {
        Ok(t) => t,
        Err(e) => {
            report.error = Some(format!("no target for {}: {e}", report.dialled));
            return report;
        }
    };
    report.target = Some(to);
    let give_up = Instant::now() + link.connect_window;
    let dialled = loop {
        match TcpStream::connect_timeout(&to, CONNECT_TIMEOUT) {
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < give_up =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            other => break other,
        }
    };
    let server = match dialled {
        Ok(s) => s,
        Err(e) => {
            // The client sees its connection closed at once.
            report.error = Some(format!(
                "connecting to {to} for {} (which dialled {}): {e}",
                report.client, report.dialled
            ));
            return report;
        }
    };
    // Small frames must not wait for Nagle's algorithm on either leg.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let _ = events.send(RelayEvent::Opened {
        client: report.client,
        dialled: report.dialled,
        target: to,
    });
    let ends = (
        End {
            stream: &client,
            name: format!("the client {}", report.client),
        },
        End {
            stream: &server,
            name: format!("the target {to}"),
        },
    );
    let (up, down) = std::thread::scope(|s| {
        let up = s.spawn(|| pump(&ends.0, &ends.1, link.delay));
        let down = pump(&ends.1, &ends.0, link.delay);
        let up = up.join().unwrap_or_else(|_| Flow {
            error: Some("the relay's thread failed".into()),
            ..Flow::default()
        });
        (up, down)
    });
    report.bytes_to_target = up.bytes;
    report.bytes_to_client = down.bytes;
    report.max_chunks_in_flight = up.max_in_flight.max(down.max_in_flight);
    report.error = up.error.or(down.error);
    report
}

/// One side of a relayed connection and how messages name it.
struct End<'a> {
    stream: &'a TcpStream,
    name: String,
}

/// One direction's outcome.
#[derive(Default)]
struct Flow {
    bytes: u64,
    max_in_flight: usize,
    error: Option<String>,
}

/// What the reader hands the writer, each with the time it may be delivered.
enum Item {
    Data(Vec<u8>),
    Eof,
    Failed(std::io::Error),
}

/// Copies `from` to `to`, each chunk `delay` after it was read; an end of stream becomes a
/// half-close of `to`. On a failure on either side both sockets are shut, so the other direction
/// and both peers see the connection end.
fn pump(from: &End, to: &End, delay: Duration) -> Flow {
    let (tx, rx): (SyncSender<(Instant, Item)>, _) = sync_channel(QUEUE_CHUNKS);
    let in_flight = AtomicUsize::new(0);
    let max_in_flight = AtomicUsize::new(0);
    let abort = || {
        let _ = from.stream.shutdown(Shutdown::Both);
        let _ = to.stream.shutdown(Shutdown::Both);
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = vec![0u8; CHUNK_BYTES];
            loop {
                let item = match (&mut &*from.stream).read(&mut buf) {
                    Ok(0) => Item::Eof,
                    Ok(n) => {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        max_in_flight.fetch_max(now, Ordering::SeqCst);
                        Item::Data(buf[..n].to_vec())
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => Item::Failed(e),
                };
                let last = !matches!(item, Item::Data(_));
                // The writer has gone (it failed): nothing more to carry.
                if tx.send((Instant::now() + delay, item)).is_err() || last {
                    return;
                }
            }
        });
        let mut flow = Flow::default();
        for (due, item) in rx.iter() {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            match item {
                Item::Data(bytes) => {
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    if let Err(e) = (&mut &*to.stream).write_all(&bytes) {
                        flow.error = Some(format!("writing to {}: {e}", to.name));
                        abort();
                        break;
                    }
                    flow.bytes += bytes.len() as u64;
                }
                Item::Eof => {
                    // A half-close: the other direction goes on. A socket already shut by a
                    // failure of the other direction has nothing left to tell.
                    let _ = to.stream.shutdown(Shutdown::Write);
                    break;
                }
                Item::Failed(e) => {
                    flow.error = Some(format!("reading from {}: {e}", from.name));
                    abort();
                    break;
                }
            }
        }
        // Unblocks a reader waiting on a full queue.
        drop(rx);
        flow.max_in_flight = max_in_flight.load(Ordering::SeqCst);
        flow
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(20);

    /// A relay on loopback in front of a fresh listener, with the listener.
    fn relay_to_listener(delay: Duration) -> (Relay, TcpListener) {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = Target::Fixed(server.local_addr().unwrap());
        let relay =
            Relay::start(&["127.0.0.1:0".parse().unwrap()], Link::new(target, delay)).unwrap();
        (relay, server)
    }

    fn closed(relay: &Relay) -> ConnectionReport {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Some(RelayEvent::Closed(r)) = relay.next_event(Duration::from_millis(100)) {
                return r;
            }
        }
        panic!("the relay never reported the connection's end");
    }

    #[test]
    fn bytes_cross_both_ways_with_half_close_and_at_least_the_delay() {
        let delay = Duration::from_millis(30);
        let (relay, server) = relay_to_listener(delay);
        let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let answer: Vec<u8> = payload.iter().rev().map(|b| b ^ 0x5a).collect();
        let echo = {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let (mut s, _) = server.accept().unwrap();
                let mut got = Vec::new();
                // Ends at the client's half-close, carried through the relay.
                s.read_to_end(&mut got).unwrap();
                s.write_all(&answer).unwrap();
                got
            })
        };
        let mut c = TcpStream::connect(relay.local_addrs()[0]).unwrap();
        let t = Instant::now();
        c.write_all(&payload).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        let round_trip = t.elapsed();
        assert_eq!(echo.join().unwrap(), payload, "bytes to the target");
        assert_eq!(back, answer, "bytes back to the client");
        // One delay each way, at the least.
        assert!(round_trip >= 2 * delay, "{round_trip:?}");
        let r = closed(&relay);
        assert_eq!(r.error, None);
        assert_eq!(
            (r.bytes_to_target, r.bytes_to_client),
            (payload.len() as u64, answer.len() as u64)
        );
    }

    #[test]
    fn a_small_message_waits_at_least_the_delay_each_way() {
        let delay = Duration::from_millis(50);
        let (relay, server) = relay_to_listener(delay);
        let pong = std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).unwrap();
            let arrived = Instant::now();
            s.write_all(b"pong").unwrap();
            arrived
        });
        let mut c = TcpStream::connect(relay.local_addrs()[0]).unwrap();
        let sent = Instant::now();
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        let back = Instant::now();
        let arrived = pong.join().unwrap();
        assert_eq!(&b, b"pong");
        assert!(arrived - sent >= delay, "one way: {:?}", arrived - sent);
        assert!(back - sent >= 2 * delay, "round trip: {:?}", back - sent);
    }

    #[test]
    fn chunks_in_flight_are_pipelined_not_one_per_delay() {
        // Ten writes 10 ms apart into a 1 s link: all ten are on the link at once, as on a real
        // link; a relay that carried one message per delay would hold one.
        let (relay, server) = relay_to_listener(Duration::from_secs(1));
        let sink = std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let mut c = TcpStream::connect(relay.local_addrs()[0]).unwrap();
        c.set_nodelay(true).unwrap();
        for i in 0..10u8 {
            c.write_all(&[i; 100]).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        c.shutdown(Shutdown::Write).unwrap();
        let got = sink.join().unwrap();
        let want: Vec<u8> = (0..10u8).flat_map(|i| [i; 100]).collect();
        assert_eq!(got, want);
        drop(c);
        let r = closed(&relay);
        assert!(r.max_chunks_in_flight >= 5, "{r:?}");
    }

    #[test]
    fn a_target_that_vanishes_is_named_and_the_client_sees_the_end() {
        let (relay, server) = relay_to_listener(Duration::from_millis(5));
        let mut c = TcpStream::connect(relay.local_addrs()[0]).unwrap();
        let (s, _) = server.accept().unwrap();
        // The target dies with bytes unread: its kernel resets the connection.
        c.write_all(&[1u8; 1000]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(s);
        drop(server);
        c.write_all(&[2u8; 1000]).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        let mut rest = Vec::new();
        // Ends (EOF or reset), rather than hanging.
        let _ = c.read_to_end(&mut rest);
        let r = closed(&relay);
        let e = r.error.expect("a reset target is an error");
        assert!(e.contains("the target 127.0.0.1:"), "{e}");
    }

    #[test]
    fn a_target_that_is_not_there_is_named() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let to = SocketAddr::from(([127, 0, 0, 1], port));
        let link = Link {
            connect_window: Duration::from_millis(300),
            ..Link::new(Target::Fixed(to), Duration::ZERO)
        };
        let relay = Relay::start(&["127.0.0.1:0".parse().unwrap()], link).unwrap();
        let mut c = TcpStream::connect(relay.local_addrs()[0]).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        assert!(rest.is_empty());
        let e = closed(&relay).error.expect("an error");
        assert!(e.contains(&format!("connecting to {to}")), "{e}");
    }

    #[test]
    fn a_target_that_listens_late_gets_the_waiting_client() {
        // Rank 0's store may start after the other ranks dial it.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let to = SocketAddr::from(([127, 0, 0, 1], port));
        let relay = Relay::start(
            &["127.0.0.1:0".parse().unwrap()],
            Link::new(Target::Fixed(to), Duration::ZERO),
        )
        .unwrap();
        let mut c = TcpStream::connect(relay.local_addrs()[0]).unwrap();
        c.write_all(b"early").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let server = TcpListener::bind(to).unwrap();
        let (mut s, _) = server.accept().unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"early");
    }

    #[test]
    fn a_client_that_vanishes_is_named_and_the_target_sees_the_end() {
        let (relay, server) = relay_to_listener(Duration::from_millis(5));
        let c = TcpStream::connect(relay.local_addrs()[0]).unwrap();
        let (mut s, _) = server.accept().unwrap();
        // The client dies with bytes unread (sent by the target): a reset.
        s.write_all(&[3u8; 1000]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(c);
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        let e = closed(&relay).error.expect("a reset client is an error");
        assert!(e.contains("the client 127.0.0.1:"), "{e}");
    }

    #[test]
    fn the_dialled_host_moves_into_the_target_network() {
        let t = Target::parse_network("10.213.1.0/24").unwrap();
        assert_eq!(
            t.resolve("10.213.0.3:20012".parse().unwrap()).unwrap(),
            "10.213.1.3:20012".parse::<SocketAddr>().unwrap()
        );
        for bad in [
            "10.213.1.0",
            "10.213.1/24",
            "10.213.1.0/0",
            "10.213.1.0/40",
            "x/8",
        ] {
            let e = Target::parse_network(bad).unwrap_err().to_string();
            assert!(e.contains("--to-net") && e.contains(bad), "{e}");
        }
        assert!(t.resolve("[::1]:5".parse().unwrap()).is_err());
    }

    #[test]
    fn delays_and_listening_addresses_parse_or_say_why_not() {
        assert_eq!(parse_delay("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_delay("0.1ms").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_delay("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_delay("10msec").unwrap(), Duration::from_millis(10));
        assert_eq!(parse_delay("0").unwrap(), Duration::ZERO);
        for bad in ["1", "1xs", "-1ms", "ms", "61s", "nanms"] {
            let e = parse_delay(bad).unwrap_err().to_string();
            assert!(e.contains("--delay") && e.contains(bad), "{e}");
        }
        let ports = parse_listen("0.0.0.0:20000-20003").unwrap();
        assert_eq!(ports.len(), 4);
        assert_eq!(ports[3], "0.0.0.0:20003".parse().unwrap());
        assert_eq!(parse_listen("127.0.0.1:7").unwrap().len(), 1);
        for bad in [
            "20000",
            "0.0.0.0:9-8",
            "0.0.0.0:70000",
            "host:1",
            "0.0.0.0:1-5000",
        ] {
            let e = parse_listen(bad).unwrap_err().to_string();
            assert!(e.contains("--listen") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn an_address_in_use_is_named() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = taken.local_addr().unwrap();
        let e = Relay::start(&[a], Link::new(Target::Fixed(a), Duration::ZERO))
            .err()
            .expect("in use")
            .to_string();
        assert!(e.contains(&format!("listening on {a}")), "{e}");
    }
}
