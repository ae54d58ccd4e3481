//! `--peer hyper`: the thinnest HTTP/1.1 proxy hyper can build, the floor of tollgate's
//! own stack. Each client connection gets one upstream connection of its own and every
//! request is handed over as it came: no routing, no pool, no header rules, no timeouts,
//! no metrics. Not a usable proxy (it forwards hop-by-hop headers, has no limits); a
//! measuring stick: the distance from it to tollgate is what tollgate's features cost,
//! the distance from it to nginx and HAProxy is what the HTTP library costs. It runs in
//! the `tollgate` binary, so with the same allocator (mimalloc).

use hyper::body::Incoming;
use hyper::client::conn::http1 as client;
use hyper::server::conn::http1 as server;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

/// `tollgate bench hyper-floor`: started by the bench as a peer process.
#[derive(Debug, clap::Args)]
pub struct FloorArgs {
    #[arg(long)]
    pub listen: SocketAddr,
    #[arg(long)]
    pub upstream: SocketAddr,
    /// Worker threads (1: a current-thread runtime, as tollgate uses for one thread).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

pub fn run(args: FloorArgs) -> Result<(), String> {
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(serve(args.listen, args.upstream))
}

async fn serve(listen: SocketAddr, upstream: SocketAddr) -> Result<(), String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let _ = relay(stream, upstream).await;
        });
    }
}

async fn relay(stream: TcpStream, upstream: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    stream.set_nodelay(true)?;
    let up = TcpStream::connect(upstream).await?;
    up.set_nodelay(true)?;
    let (sender, conn) = client::handshake::<_, Incoming>(TokioIo::new(up)).await?;
    tokio::spawn(conn);
    // One request at a time on an HTTP/1.1 connection, so the lock is never contended;
    // the response future does not borrow the sender.
    let sender = Arc::new(Mutex::new(sender));
    let svc = service_fn(move |req| sender.lock().expect("sender lock").send_request(req));
    server::Builder::new()
        .serve_connection(TokioIo::new(stream), svc)
        .await?;
    Ok(())
}
