//! The proxy listener, one socket per worker. On Linux, the workers' sockets are bound to
//! one address with `SO_REUSEPORT`: the kernel spreads new connections over them by a hash
//! of each connection's addresses, so every worker accepts from a queue of its own (no
//! shared accept queue, no wake-up of every worker per connection). Elsewhere, where
//! `SO_REUSEPORT` does not balance, the workers share one socket.
//!
//! A socket group with `SO_REUSEPORT` would let a second tollgate started on the same
//! address (same user) join the first one's group and take half of its connections
//! silently; a plain bind is tried first, so that case fails as "address in use", as it
//! does with one socket.

use std::io;
use std::net::SocketAddr;

/// Backlog of each socket (nginx uses 511; a burst of connections at start-up of a
/// benchmark or a connection pool should not overflow it).
const BACKLOG: u32 = 1024;

/// Binds `workers` sockets to `addr` (at least one). With port 0 every socket gets the
/// port the kernel chose for the first. The sockets are non-blocking, ready for
/// [`tokio::net::TcpListener::from_std`] in each worker's runtime. Must be called inside
/// a tokio runtime.
pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Vec<std::net::TcpListener>> {
    if addr.port() != 0 {
        // Fails while any socket (a reuse-port group included) listens on `addr`.
        drop(std::net::TcpListener::bind(addr)?);
    }
    let first = socket(addr)?;
    let addr = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers.max(1) {
        let next = if cfg!(target_os = "linux") {
            socket(addr)?
        } else {
            all[0].try_clone()?
        };
        all.push(next);
    }
    Ok(all)
}

fn socket(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // SO_REUSEADDR as std sets it: a restart binds while old connections sit in TIME_WAIT.
    s.set_reuseaddr(true)?;
    #[cfg(target_os = "linux")]
    s.set_reuseport(true)?;
    s.bind(addr)?;
    s.listen(BACKLOG)?.into_std()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn workers_share_one_address_and_a_second_group_is_refused() {
        let all = bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let addr = all[0].local_addr().unwrap();
        assert_eq!(all.len(), 3);
        for l in &all {
            assert_eq!(l.local_addr().unwrap(), addr);
        }
        let again = bind(addr, 2).expect_err("the address is taken");
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse);
    }
}
