//! Address-level egress control, applied to every address a target resolves to, after
//! DNS and before connecting (the approach of Stripe's Smokescreen): host text can be
//! spelled many ways (`127.1`, `2130706433`, a name in `/etc/hosts`), the address the
//! socket connects to cannot. Also here: CONNECT's port list, and the guard that keeps
//! tollgate from connecting to its own listeners.

use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Cloud metadata endpoints, denied unless `egress.deny_metadata: false`: AWS, GCP, Azure
/// and OpenStack (169.254.169.254), AWS over IPv6 (fd00:ec2::254), AWS ECS task metadata
/// (169.254.170.2), Alibaba Cloud (100.100.100.200).
pub const METADATA: &[&str] = &[
    "169.254.169.254/32",
    "169.254.170.2/32",
    "fd00:ec2::254/128",
    "100.100.100.200/32",
];

/// What `egress.deny_private: true` denies: unspecified, loopback, private (RFC 1918,
/// RFC 4193), shared (CGNAT, RFC 6598), link-local, benchmarking, IETF protocol
/// assignments, multicast and reserved ranges.
pub const PRIVATE: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// Ports CONNECT may reach: a set of inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSet(pub Vec<(u16, u16)>);

impl PortSet {
    pub fn contains(&self, port: u16) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&port))
    }
}

impl fmt::Display for PortSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (lo, hi)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

/// The validated `egress` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRules {
    /// Win over every deny (not over the own-listener guard).
    pub allow: Vec<IpNet>,
    /// `egress.deny`, the metadata and private ranges when switched on, and the IP
    /// literals of `domains.deny`.
    pub deny: Vec<IpNet>,
    pub connect_ports: PortSet,
}

impl Default for EgressRules {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: METADATA.iter().map(|n| n.parse().expect("valid")).collect(),
            connect_ports: PortSet(vec![(443, 443)]),
        }
    }
}

/// Which of tollgate's own listeners an address reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Proxy,
    Admin,
}

/// Why an address may not be connected to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("`{target}` is this tollgate's own proxy listener ({addr}): forwarding would loop")]
    OwnProxy { target: String, addr: SocketAddr },
    #[error(
        "`{target}` is this tollgate's admin listener ({addr}), which is never reachable through the proxy"
    )]
    OwnAdmin { target: String, addr: SocketAddr },
    #[error("`{target}` resolves to {addr}, which the egress address rules deny ({net})")]
    Denied {
        target: String,
        addr: IpAddr,
        net: IpNet,
    },
}

/// The egress rules together with the addresses tollgate itself listens on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Egress {
    pub rules: EgressRules,
    pub own: Vec<(SocketAddr, Listener)>,
}

impl Egress {
    /// The check a client uses: the rules, with tollgate's own listeners.
    pub fn new(rules: &EgressRules, own: &[(SocketAddr, Listener)]) -> Self {
        Self {
            rules: rules.clone(),
            own: own.to_vec(),
        }
    }

    /// Whether tollgate may connect to `addr` for `target` (the name, for messages). The
    /// rules judge the address the connection reaches ([`destination`]), not its spelling.
    pub fn check(&self, target: &str, addr: SocketAddr) -> Result<(), Denied> {
        let ip = destination(addr).ip();
        for &(own, which) in &self.own {
            if own.port() == addr.port() && reaches(own.ip(), ip) {
                let target = target.to_owned();
                return Err(match which {
                    Listener::Proxy => Denied::OwnProxy { target, addr: own },
                    Listener::Admin => Denied::OwnAdmin { target, addr: own },
                });
            }
        }
        if self.rules.allow.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        match self.rules.deny.iter().find(|n| n.contains(&ip)) {
            Some(net) => Err(Denied::Denied {
                target: target.to_owned(),
                addr: ip,
                net: *net,
            }),
            None => Ok(()),
        }
    }
}

/// The address a connection to `addr` really reaches, in canonical form. RFC 1122
/// §3.2.1.3 calls 0.0.0.0 "this host", and Linux and the BSDs connect a socket aimed at
/// the unspecified address (`0.0.0.0`, `::`, `::ffff:0.0.0.0`) to loopback. Judged as
/// what it is, `0.0.0.0:8081` is the admin listener on 127.0.0.1 and falls under a deny
/// of `127.0.0.0/8`; the connector connects to this address too, so what was checked is
/// what is reached.
pub fn destination(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip().to_canonical() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// Whether a connection to `ip` reaches a listener bound to `bound`: the same address,
/// or any address of this machine when the listener is bound to the unspecified address.
fn reaches(bound: IpAddr, ip: IpAddr) -> bool {
    let bound = bound.to_canonical();
    if bound == ip {
        return true;
    }
    if !bound.is_unspecified() {
        return false;
    }
    // Binding a socket to an address succeeds only for this machine's own addresses: a
    // portable test that needs no interface list. Only reached when the port matches.
    ip.is_loopback() || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The canonical address of an IP literal in any spelling a resolver accepts: IPv4 in
/// the inet_aton forms (`127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`), IPv6, and
/// IPv4-mapped IPv6 as its IPv4 address. `None` for anything that is not an IP literal.
pub fn canonical_ip(host: &str) -> Option<IpAddr> {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h.contains(':') {
        return h
            .parse::<Ipv6Addr>()
            .ok()
            .map(|a| IpAddr::V6(a).to_canonical());
    }
    inet_aton(h).map(IpAddr::V4)
}

/// IPv4 as inet_aton(3) reads it: one to four parts, each decimal, octal (leading `0`)
/// or hex (`0x`); the last part fills the remaining bytes.
fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        let (digits, radix) = if let Some(h) = p.strip_prefix("0x").or(p.strip_prefix("0X")) {
            (h, 16)
        } else if p.len() > 1 && p.starts_with('0') {
            (&p[1..], 8)
        } else {
            (*p, 10)
        };
        if digits.is_empty() && radix != 16 {
            return None;
        }
        let n = if digits.is_empty() {
            0
        } else {
            if !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            u32::from_str_radix(digits, radix).ok()?
        };
        nums.push(n);
    }
    let (last, head) = nums.split_last()?;
    if head.iter().any(|&n| n > 255) {
        return None;
    }
    let last_bits = 32 - 8 * head.len() as u32;
    if last_bits < 32 && *last >= 1 << last_bits {
        return None;
    }
    let mut v: u32 = 0;
    for (i, &n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i);
    }
    Some(Ipv4Addr::from(v | last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_loopback_is_canonical() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        for s in [
            "127.0.0.1",
            "127.1",
            "127.0.1",
            "2130706433",
            "0x7f000001",
            "0x7F.0.0.1",
            "0177.0.0.1",
            "0177.00.00.01",
            "[::ffff:127.0.0.1]",
            "::ffff:7f00:1",
        ] {
            assert_eq!(canonical_ip(s), Some(lo), "{s}");
        }
        assert_eq!(canonical_ip("[::1]"), Some("::1".parse().unwrap()));
        for s in [
            "example.com",
            "1.2.3.com",
            "256.0.0.1",
            "1.2.3.4.5",
            "08.0.0.1",
            "",
            "4294967296",
            "1.16777216",
        ] {
            assert_eq!(canonical_ip(s), None, "{s}");
        }
        assert_eq!(
            canonical_ip("1.16777215"),
            Some(IpAddr::from([1, 255, 255, 255]))
        );
    }

    fn egress(allow: &[&str], deny: &[&str]) -> Egress {
        Egress {
            rules: EgressRules {
                allow: allow.iter().map(|n| n.parse().unwrap()).collect(),
                deny: deny.iter().map(|n| n.parse().unwrap()).collect(),
                connect_ports: PortSet(vec![(443, 443)]),
            },
            own: vec![
                ("127.0.0.1:8000".parse().unwrap(), Listener::Proxy),
                ("0.0.0.0:8081".parse().unwrap(), Listener::Admin),
            ],
        }
    }

    #[test]
    fn own_listeners_then_allow_then_deny() {
        let e = egress(&["10.1.0.0/16"], &["10.0.0.0/8", "169.254.169.254/32"]);
        let at = |s: &str| e.check("t", s.parse().unwrap());
        assert!(matches!(at("127.0.0.1:8000"), Err(Denied::OwnProxy { .. })));
        assert!(matches!(
            at("[::ffff:127.0.0.1]:8000"),
            Err(Denied::OwnProxy { .. })
        ));
        assert!(at("127.0.0.1:8001").is_ok());
        // The admin listener is on every address: any loopback address reaches it.
        assert!(matches!(at("127.0.0.9:8081"), Err(Denied::OwnAdmin { .. })));
        assert!(matches!(at("[::1]:8081"), Err(Denied::OwnAdmin { .. })));
        assert!(matches!(at("10.2.0.1:443"), Err(Denied::Denied { .. })));
        assert!(at("10.1.2.3:443").is_ok(), "allow wins over deny");
        assert!(matches!(
            at("169.254.169.254:80"),
            Err(Denied::Denied { .. })
        ));
        assert!(at("93.184.216.34:443").is_ok());
    }

    #[test]
    fn the_unspecified_address_is_judged_as_the_loopback_it_reaches() {
        // Listeners on 127.0.0.1 only (tollgate's defaults).
        let mut e = egress(&[], &["127.0.0.0/8"]);
        e.own = vec![
            ("127.0.0.1:8000".parse().unwrap(), Listener::Proxy),
            ("127.0.0.1:8081".parse().unwrap(), Listener::Admin),
        ];
        let at = |s: &str| e.check("t", s.parse().unwrap());
        for spelling in ["0.0.0.0", "[::ffff:0.0.0.0]"] {
            assert!(matches!(
                at(&format!("{spelling}:8081")),
                Err(Denied::OwnAdmin { .. })
            ));
            assert!(matches!(
                at(&format!("{spelling}:8000")),
                Err(Denied::OwnProxy { .. })
            ));
            assert!(matches!(
                at(&format!("{spelling}:9000")),
                Err(Denied::Denied { .. })
            ));
        }
        assert!(at("[::]:9000").is_ok(), "::1 is outside 127.0.0.0/8");
        assert_eq!(
            destination("[::]:9000".parse().unwrap()),
            "[::1]:9000".parse().unwrap()
        );
        assert_eq!(
            destination("0.0.0.0:1".parse().unwrap()),
            "127.0.0.1:1".parse().unwrap()
        );
        let v6 = egress(&[], &["::1/128"]);
        assert!(matches!(
            v6.check("t", "[::]:9000".parse().unwrap()),
            Err(Denied::Denied { .. })
        ));
    }

    #[test]
    fn port_sets() {
        let p = PortSet(vec![(443, 443), (8000, 8100)]);
        assert!(p.contains(443) && p.contains(8050) && !p.contains(22));
        assert_eq!(p.to_string(), "443, 8000-8100");
    }
}
