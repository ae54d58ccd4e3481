//! Upstream names resolved by hickory-resolver against a DNS server of the test's own
//! (`upstream.dns_servers`): an answer is kept for its records' TTL, capped by
//! `upstream.dns_ttl`, so a name that moves to another address is followed by new
//! connections once its record expires.

use crate::support::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A DNS server answering every A question with `address` (an IPv4 as u32) and `ttl`
/// seconds, and AAAA questions with no record; counts the A questions.
struct Dns {
    addr: SocketAddr,
    address: Arc<AtomicU32>,
    asked: Arc<AtomicU64>,
}

impl Dns {
    async fn start(address: Ipv4Addr, ttl: u32) -> Dns {
        Self::answering_after(address, ttl, std::time::Duration::ZERO).await
    }

    /// A server that answers each question `delay` after it came (a slow resolver).
    async fn answering_after(address: Ipv4Addr, ttl: u32, delay: std::time::Duration) -> Dns {
        let socket = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = socket.local_addr().unwrap();
        let (a, n) = (
            Arc::new(AtomicU32::new(address.into())),
            Arc::new(AtomicU64::new(0)),
        );
        let (a2, n2) = (a.clone(), n.clone());
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                let Ok((len, from)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                if let Some(r) = reply(&buf[..len], &a2, ttl, &n2) {
                    let socket = socket.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = socket.send_to(&r, from).await;
                    });
                }
            }
        });
        Dns {
            addr,
            address: a,
            asked: n,
        }
    }
}

/// The reply to one query (RFC 1035 §4.1): the header with QR and RA set, the question
/// as asked, and for type A one record pointing back at the question's name.
fn reply(q: &[u8], address: &AtomicU32, ttl: u32, asked: &AtomicU64) -> Option<Vec<u8>> {
    if q.len() < 12 {
        return None;
    }
    // The question: labels up to the zero length, then type and class.
    let mut at = 12;
    while *q.get(at)? != 0 {
        at += 1 + q[at] as usize;
    }
    let end = at + 5;
    let qtype = u16::from_be_bytes([*q.get(at + 1)?, *q.get(at + 2)?]);
    let a = qtype == 1;
    if a {
        asked.fetch_add(1, Ordering::SeqCst);
    }
    let mut r = Vec::with_capacity(end + 16);
    r.extend_from_slice(&q[..2]); // id
    r.extend_from_slice(&[0x81 | (q[2] & 0x01), 0x80]); // QR, RD as asked, RA; NOERROR
    r.extend_from_slice(&[0, 1, 0, a as u8, 0, 0, 0, 0]); // 1 question, 0 or 1 answer
    r.extend_from_slice(q.get(12..end)?);
    if a {
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]); // the question's name, A, IN
        r.extend_from_slice(&ttl.to_be_bytes());
        r.extend_from_slice(&[0, 4]);
        r.extend_from_slice(&address.load(Ordering::SeqCst).to_be_bytes());
    }
    Some(r)
}

/// Which upstream answered a call to `name:port` through the gateway.
async fn which(gw: &tollgate::server::Gateway, name: &str, port: u16) -> String {
    let got = send(
        &client(),
        http::Request::get(format!("http://{}/", gw.proxy_addr))
            .header("x-tollgate-host", format!("{name}:{port}"))
            .header("x-tollgate-scheme", "http")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    String::from_utf8_lossy(&got.body).into_owned()
}

#[tokio::test]
async fn an_answer_is_kept_for_its_ttl_and_a_moved_name_is_followed() {
    let one = upstream(|_req| async { answer_of("one") }).await;
    let port = one.addr.port();
    // The name's second home: another loopback address, the same port.
    let two = upstream_on(SocketAddr::from(([127, 0, 0, 2], port)), |_req| async {
        answer_of("two")
    })
    .await;
    let dns = Dns::start(Ipv4Addr::LOCALHOST, 1).await;
    // One worker: each keeps answers of its own.
    let gw = gateway_with_workers(
        &format!(
            "upstream:\n  dns_servers: [\"{}\"]\n  dns_ttl: 1h\n",
            dns.addr
        ),
        1,
    )
    .await;
    let name = "api.provider.test";

    assert_eq!(which(&gw, name, port).await, "one");
    let first = dns.asked.load(Ordering::SeqCst);
    assert!(first >= 1, "the name was asked");
    // A new connection within the record's TTL: the kept answer, no question.
    assert_eq!(which(&gw, name, port).await, "one");
    assert_eq!(dns.asked.load(Ordering::SeqCst), first, "kept for its TTL");
    // The provider moves; its record said 1 s, and tollgate follows once it passes.
    dns.address
        .store(Ipv4Addr::new(127, 0, 0, 2).into(), Ordering::SeqCst);
    eventually("the moved name followed", || async {
        match which(&gw, name, port).await.as_str() {
            "two" => Ok(()),
            other => Err(other.to_owned()),
        }
    })
    .await;
    assert!(dns.asked.load(Ordering::SeqCst) > first, "asked again");
    drop(two);
}

#[tokio::test]
async fn dns_ttl_caps_a_long_ttl() {
    let up = upstream(|_req| async { answer_of("up") }).await;
    // The record says a day; the gateway keeps it at most 1 s.
    let dns = Dns::start(Ipv4Addr::LOCALHOST, 86_400).await;
    let gw = gateway_with_workers(
        &format!(
            "upstream:\n  dns_servers: [\"{}\"]\n  dns_ttl: 1s\n",
            dns.addr
        ),
        1,
    )
    .await;
    let name = "capped.provider.test";
    assert_eq!(which(&gw, name, up.addr.port()).await, "up");
    let first = dns.asked.load(Ordering::SeqCst);
    assert_eq!(which(&gw, name, up.addr.port()).await, "up");
    assert_eq!(dns.asked.load(Ordering::SeqCst), first, "kept, for now");
    eventually("asked again within the cap", || async {
        which(&gw, name, up.addr.port()).await;
        if dns.asked.load(Ordering::SeqCst) > first {
            Ok(())
        } else {
            Err(dns.asked.load(Ordering::SeqCst))
        }
    })
    .await;
}

#[test]
fn a_dns_server_that_is_not_an_address_is_refused_at_its_path() {
    let e = tollgate::Config::from_yaml(
        "upstream:\n  dns_servers: [\"10.0.0.2\", \"resolver.local\"]\n",
    )
    .map(|_| ())
    .unwrap_err();
    let text = e[0].to_string();
    assert!(
        text.starts_with("upstream.dns_servers[1]: `resolver.local` is not a DNS server address"),
        "{text}"
    );
}

/// An answer that closes its connection: the next call connects, and so resolves,
/// again (a pooled connection stays with the address it was opened to).
fn answer_of(who: &str) -> http::Response<tollgate::body::Body> {
    answer(200, &[("connection", "close")], who)
}

/// Calls to a name whose DNS answers slowly, arriving one after another and each giving
/// up at its connect deadline, share one lookup: it runs on past the first caller's
/// deadline and answers the later ones from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lookups_of_a_slow_name_are_one() {
    let up = upstream(|_req| async { answer_of("one") }).await;
    let dns =
        Dns::answering_after(Ipv4Addr::LOCALHOST, 300, std::time::Duration::from_secs(2)).await;
    let gw = gateway(&format!(
        "upstream:\n  dns_servers: [\"{}\"]\n  connect_timeout: 300ms\n",
        dns.addr
    ))
    .await;
    let name = "slow.provider.test";
    let mut calls = Vec::new();
    for _ in 0..30 {
        let (proxy, port) = (gw.proxy_addr, up.addr.port());
        calls.push(tokio::spawn(async move {
            send(
                &client(),
                http::Request::get(format!("http://{proxy}/"))
                    .header("x-tollgate-host", format!("{name}:{port}"))
                    .header("x-tollgate-scheme", "http")
                    .body(empty())
                    .unwrap(),
            )
            .await
            .status
        }));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for c in calls {
        let _ = c.await.unwrap();
    }
    // The one lookup's answer lands in the cache: a later call connects without asking.
    eventually("the slow answer arrived and was kept", || async {
        let got = send(
            &client(),
            http::Request::get(format!("http://{}/", gw.proxy_addr))
                .header("x-tollgate-host", format!("{name}:{}", up.addr.port()))
                .header("x-tollgate-scheme", "http")
                .body(empty())
                .unwrap(),
        )
        .await;
        match got.status.as_u16() {
            200 => Ok(()),
            other => Err(other),
        }
    })
    .await;
    let asked = dns.asked.load(Ordering::SeqCst);
    assert!(
        asked <= 2,
        "{asked} questions for one name (one lookup, a retry at most)"
    );
}
