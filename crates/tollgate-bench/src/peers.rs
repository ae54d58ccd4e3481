//! Peers measured in the same run: nginx and HAProxy as reverse proxies in front of the
//! same provider, upstream keep-alive on, logging off, one worker.

use crate::procs::{Proc, command, free_port, on_path, wait_port};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Nginx,
    Haproxy,
}

impl Peer {
    pub fn parse(s: &str) -> Result<Peer, String> {
        match s {
            "nginx" => Ok(Peer::Nginx),
            "haproxy" => Ok(Peer::Haproxy),
            other => Err(format!("unknown peer `{other}`: use nginx or haproxy")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Peer::Nginx => "nginx",
            Peer::Haproxy => "haproxy",
        }
    }

    fn binary(self) -> &'static str {
        self.name()
    }
}

pub fn nginx_config(
    dir: &Path,
    listen: SocketAddr,
    provider: SocketAddr,
    workers: usize,
) -> String {
    format!(
        "worker_processes {workers};\ndaemon off;\npid {dir}/nginx.pid;\nerror_log {dir}/nginx-error.log crit;\n\
         events {{ worker_connections 8192; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n  fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n\
         \x20 upstream provider {{ server {provider}; keepalive 512; }}\n\
         \x20 server {{\n    listen {listen};\n    location / {{\n      proxy_pass http://provider;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n",
        dir = dir.display()
    )
}

pub fn haproxy_config(listen: SocketAddr, provider: SocketAddr, threads: usize) -> String {
    format!(
        "global\n  nbthread {threads}\n  maxconn 4000\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  option http-keep-alive\n  http-reuse always\n\
         frontend fe\n  bind {listen}\n  default_backend be\nbackend be\n  server p1 {provider}\n"
    )
}

/// Starts a peer in front of `provider`, or says why it is skipped (`Err`).
pub fn start(
    peer: Peer,
    dir: &Path,
    provider: SocketAddr,
    cores: Option<&str>,
    workers: usize,
) -> Result<(Proc, SocketAddr), String> {
    let bin =
        on_path(peer.binary()).ok_or_else(|| format!("{} is not on PATH; skipped", peer.name()))?;
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("valid address");
    let (mut cmd, placement) = command(&bin, cores);
    match peer {
        Peer::Nginx => {
            let conf = dir.join("nginx.conf");
            std::fs::write(&conf, nginx_config(dir, listen, provider, workers))
                .map_err(|e| e.to_string())?;
            cmd.arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(dir.join("nginx-error.log"));
        }
        Peer::Haproxy => {
            let conf = dir.join("haproxy.cfg");
            std::fs::write(&conf, haproxy_config(listen, provider, workers))
                .map_err(|e| e.to_string())?;
            cmd.arg("-f").arg(&conf).arg("-db");
        }
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .stdin(Stdio::null());
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", peer.name()))?;
    let proc = Proc::new(peer.name(), child, placement);
    wait_port(listen, Duration::from_secs(10))
        .map_err(|e| format!("{} did not start: {e}", peer.name()))?;
    Ok((proc, listen))
}
