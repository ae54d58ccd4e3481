//! Peers measured in the same run: nginx and HAProxy as reverse proxies in front of the
//! same provider, upstream keep-alive on, logging off, one worker; and `haproxy-tcp`,
//! HAProxy as a layer-4 relay (bytes copied, no HTTP parsed): the floor, what one more
//! hop through any user-space proxy costs on the machine; and `hyper`, the thinnest proxy
//! tollgate's HTTP library can build ([`crate::floor`]), run by this same binary.

use crate::procs::{Proc, command, free_port, on_path, under, wait_port};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Nginx,
    Haproxy,
    HaproxyTcp,
    Hyper,
}

impl Peer {
    pub fn parse(s: &str) -> Result<Peer, String> {
        match s {
            "nginx" => Ok(Peer::Nginx),
            "haproxy" => Ok(Peer::Haproxy),
            "haproxy-tcp" => Ok(Peer::HaproxyTcp),
            "hyper" => Ok(Peer::Hyper),
            other => Err(format!(
                "unknown peer `{other}`: use nginx, haproxy, haproxy-tcp or hyper"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Peer::Nginx => "nginx",
            Peer::Haproxy => "haproxy",
            Peer::HaproxyTcp => "haproxy-tcp",
            Peer::Hyper => "hyper",
        }
    }

    fn binary(self) -> Option<PathBuf> {
        match self {
            // This binary: `tollgate bench hyper-floor`.
            Peer::Hyper => std::env::current_exe().ok(),
            _ => on_path(self.binary_name()),
        }
    }

    fn binary_name(self) -> &'static str {
        match self {
            Peer::Nginx => "nginx",
            Peer::Haproxy | Peer::HaproxyTcp => "haproxy",
            Peer::Hyper => "tollgate",
        }
    }
}

/// nginx in front of `provider`; `one_process`: no master (`master_process off`), so a
/// tool it runs under sees the process that serves.
pub fn nginx_config(
    dir: &Path,
    listen: SocketAddr,
    provider: SocketAddr,
    workers: usize,
    one_process: bool,
) -> String {
    let master = if one_process {
        "master_process off;\n"
    } else {
        ""
    };
    format!(
        "{master}worker_processes {workers};\ndaemon off;\npid {dir}/nginx.pid;\nerror_log {dir}/nginx-error.log crit;\n\
         events {{ worker_connections 8192; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n  fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n\
         \x20 upstream provider {{ server {provider}; keepalive 512; }}\n\
         \x20 server {{\n    listen {listen};\n    location / {{\n      proxy_pass http://provider;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n",
        dir = dir.display()
    )
}

/// `mode` is `http` (a reverse proxy) or `tcp` (a layer-4 relay, the floor).
pub fn haproxy_config(
    listen: SocketAddr,
    provider: SocketAddr,
    threads: usize,
    mode: &str,
) -> String {
    let http = if mode == "http" {
        "  option http-keep-alive\n  http-reuse always\n"
    } else {
        ""
    };
    format!(
        "global\n  nbthread {threads}\n  maxconn 4000\ndefaults\n  mode {mode}\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n{http}\
         frontend fe\n  bind {listen}\n  default_backend be\nbackend be\n  server p1 {provider}\n"
    )
}

/// Where a peer runs: its files' folder, the provider it fronts, its cores (a `taskset`
/// list) and the tool it runs under (empty: none).
pub struct At<'a> {
    pub dir: &'a Path,
    pub provider: SocketAddr,
    pub cores: Option<&'a str>,
    pub tool: &'a [OsString],
}

/// Starts a peer in front of `at.provider`, or says why it is skipped (`Err`).
pub fn start(peer: Peer, at: &At, workers: usize) -> Result<(Proc, SocketAddr), String> {
    let (dir, provider) = (at.dir, at.provider);
    let bin = peer
        .binary()
        .ok_or_else(|| format!("{} is not on PATH; skipped", peer.binary_name()))?;
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("valid address");
    let (mut cmd, placement) = command(&bin, at.cores);
    match peer {
        Peer::Nginx => {
            let conf = dir.join("nginx.conf");
            let one_process = !at.tool.is_empty();
            std::fs::write(
                &conf,
                nginx_config(dir, listen, provider, workers, one_process),
            )
            .map_err(|e| e.to_string())?;
            cmd.arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(dir.join("nginx-error.log"));
        }
        Peer::Haproxy | Peer::HaproxyTcp => {
            let mode = if peer == Peer::Haproxy { "http" } else { "tcp" };
            let conf = dir.join(format!("{}.cfg", peer.name()));
            std::fs::write(&conf, haproxy_config(listen, provider, workers, mode))
                .map_err(|e| e.to_string())?;
            cmd.arg("-f").arg(&conf).arg("-db");
        }
        Peer::Hyper => {
            cmd.args(["bench", "hyper-floor", "--listen"])
                .arg(listen.to_string())
                .arg("--upstream")
                .arg(provider.to_string())
                .arg("--threads")
                .arg(workers.to_string());
        }
    }
    let mut cmd = under(at.tool, cmd);
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .stdin(Stdio::null());
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", peer.name()))?;
    let proc = Proc::new(peer.name(), child, placement);
    // Under a tool (valgrind) a start takes seconds.
    wait_port(listen, Duration::from_secs(30))
        .map_err(|e| format!("{} did not start: {e}", peer.name()))?;
    Ok((proc, listen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_as_reverse_proxy_or_layer_4_relay() {
        let (l, p) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        let http = haproxy_config(l, p, 1, "http");
        assert!(http.contains("mode http") && http.contains("http-reuse always"));
        let tcp = haproxy_config(l, p, 2, "tcp");
        assert!(
            tcp.contains("mode tcp") && tcp.contains("nbthread 2"),
            "{tcp}"
        );
        assert!(!tcp.contains("http-"), "no HTTP options in tcp mode: {tcp}");
        assert_eq!(Peer::parse("haproxy-tcp"), Ok(Peer::HaproxyTcp));
        assert_eq!(Peer::HaproxyTcp.binary_name(), "haproxy");
        assert_eq!(Peer::parse("hyper"), Ok(Peer::Hyper));
        assert!(Peer::parse("envoy").is_err());
    }
}
