//! Transparency: what a proxy must not change (methods, paths, query, repeated headers,
//! bodies, status, trailers) and the few things it must (hop-by-hop, control headers, Host).

use crate::support::*;
use http::{Method, Request, Response, StatusCode};
use tollgate::body::Body;

fn headers_named<'a>(seen: &'a serde_json::Value, name: &str) -> Vec<&'a str> {
    seen["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0] == name)
        .map(|h| h[1].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn methods_paths_queries_and_bodies_pass_unchanged() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let c = client();
    let paths = [
        "/",
        "/v1/items?x=1&x=2&y=%20z",
        "/a%2Fb/c;matrix=1?q=%E2%9C%93",
        "/path/with/trailing/",
        "/weird?empty=&=v&&",
    ];
    for method in [
        "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND",
    ] {
        for path in paths {
            let body = if method == "GET" {
                String::new()
            } else {
                format!("body of {method} {path}\n\u{2713}")
            };
            let req = via_header(&gw, up.addr, path)
                .method(Method::from_bytes(method.as_bytes()).unwrap())
                .body(bytes_body(body.clone()))
                .unwrap();
            let got = send(&c, req).await;
            assert_eq!(got.status, StatusCode::OK);
            let seen = got.json();
            assert_eq!(seen["method"], method);
            assert_eq!(seen["path"], path, "path and query byte for byte");
            assert_eq!(seen["body"], body.as_str());
        }
    }
}

#[tokio::test]
async fn head_method_passes() {
    let up = upstream(|_req| async {
        let mut r = Response::new(tollgate::body::empty());
        r.headers_mut()
            .insert("content-length", "1234".parse().unwrap());
        r
    })
    .await;
    let gw = gateway("").await;
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/")
            .method(Method::HEAD)
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("content-length"), Some("1234"));
    assert!(got.body.is_empty());
}

#[tokio::test]
async fn repeated_headers_keep_their_values_and_order() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let req = via_header(&gw, up.addr, "/")
        .header("x-multi", "one")
        .header("x-multi", "two")
        .header("x-multi", "three, four")
        .header("authorization", "Bearer abc")
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .header("accept-encoding", "gzip")
        .body(empty())
        .unwrap();
    let seen = send(&client(), req).await.json();
    assert_eq!(
        headers_named(&seen, "x-multi"),
        ["one", "two", "three, four"]
    );
    assert_eq!(headers_named(&seen, "cookie"), ["a=1", "b=2"]);
    assert_eq!(headers_named(&seen, "authorization"), ["Bearer abc"]);
    assert_eq!(headers_named(&seen, "accept-encoding"), ["gzip"]);
}

#[tokio::test]
async fn hop_by_hop_and_control_headers_are_removed_and_host_is_the_upstream() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let req = via_header(&gw, up.addr, "/")
        .header("connection", "x-hop, keep-alive")
        .header("x-hop", "must go")
        .header("keep-alive", "timeout=5")
        .header("proxy-authorization", "Basic Zm9vOmJhcg==")
        .header("te", "gzip")
        .header("x-tollgate-anything", "internal")
        .header("x-tollgate-request-id", "req-42")
        .header("x-end-to-end", "stays")
        .body(empty())
        .unwrap();
    let got = send(&client(), req).await;
    let seen = got.json();
    for gone in [
        "x-hop",
        "keep-alive",
        "proxy-authorization",
        "te",
        "x-tollgate-host",
        "x-tollgate-scheme",
        "x-tollgate-anything",
        "x-tollgate-request-id",
    ] {
        assert!(
            headers_named(&seen, gone).is_empty(),
            "{gone} must not reach the upstream: {seen}"
        );
    }
    assert_eq!(headers_named(&seen, "x-end-to-end"), ["stays"]);
    assert_eq!(headers_named(&seen, "host"), [up.addr.to_string().as_str()]);
    assert_eq!(
        got.header("x-tollgate-request-id"),
        Some("req-42"),
        "request id echoed"
    );
}

/// The end-to-end header names of a recorded head, in the order they arrived.
fn names_in_order(head: &str, keep: &[&str]) -> Vec<String> {
    head_lines(head)
        .iter()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, _)| n.to_ascii_lowercase())
        .filter(|n| keep.contains(&n.as_str()))
        .collect()
}

#[tokio::test]
async fn end_to_end_headers_keep_their_order_whatever_is_removed() {
    const ORDER: [&str; 5] = ["x-e", "x-a", "x-d", "x-b", "x-c"];
    let (up, heads) = recording_upstream().await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /r\n    upstream: http://{}\npolicies:\n  - name: p\n    match: {{host: 127.0.0.1, path: /edited}}\n    request: {{remove_headers: [x-a]}}\n",
        up.addr
    ))
    .await;
    let fields = |extra: &[(&str, &str)]| {
        let mut h = String::new();
        // Headers to remove before, between and after the end-to-end ones.
        for (i, n) in ORDER.iter().enumerate() {
            if let Some((en, ev)) = extra.get(i) {
                h.push_str(&format!("{en}: {ev}\r\n"));
            }
            h.push_str(&format!("{n}: {i}\r\n"));
        }
        h
    };
    let a = up.addr;
    let requests = [
        // Forward proxy, as `curl -x` sends it.
        format!(
            "GET http://{a}/fwd HTTP/1.1\r\nHost: {a}\r\n{}\r\n",
            fields(&[
                ("proxy-connection", "keep-alive"),
                ("connection", "x-hop"),
                ("x-hop", "1")
            ])
        ),
        // Header mode, tollgate's own headers first.
        format!(
            "GET /hdr HTTP/1.1\r\nHost: gw\r\n{}\r\n",
            fields(&[
                ("x-tollgate-host", &a.to_string()),
                ("x-tollgate-scheme", "http"),
                ("keep-alive", "5")
            ])
        ),
        // Route mode.
        format!(
            "GET /r/route HTTP/1.1\r\nHost: gw\r\n{}\r\n",
            fields(&[("te", "gzip"), ("proxy-authorization", "Basic eDp5")])
        ),
    ];
    for r in &requests {
        let answer = raw_exchange(
            gw.proxy_addr,
            r.replacen("\r\n\r\n", "\r\nconnection: close\r\n\r\n", 1)
                .as_bytes(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // A policy that removes one: the others keep their order.
    let edited = format!(
        "GET /edited HTTP/1.1\r\nHost: gw\r\nx-tollgate-host: {a}\r\nx-tollgate-scheme: http\r\n{}connection: close\r\n\r\n",
        fields(&[])
    );
    assert!(
        raw_exchange(gw.proxy_addr, edited.as_bytes())
            .await
            .starts_with("HTTP/1.1 200")
    );
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 4, "{heads:#?}");
    for head in &heads[..3] {
        assert_eq!(names_in_order(head, &ORDER), ORDER, "{head}");
    }
    assert_eq!(
        names_in_order(&heads[3], &ORDER),
        ["x-e", "x-d", "x-b", "x-c"],
        "{}",
        heads[3]
    );
}

#[tokio::test]
async fn status_codes_and_response_headers_pass_untouched() {
    let up = upstream(|req: Request<hyper::body::Incoming>| async move {
        let code: u16 = req.uri().path().trim_start_matches('/').parse().unwrap();
        let mut r = Response::new(tollgate::body::full(format!("status {code}")));
        *r.status_mut() = StatusCode::from_u16(code).unwrap();
        let h = r.headers_mut();
        h.append("set-cookie", "a=1; Path=/".parse().unwrap());
        h.append("set-cookie", "b=2; Path=/".parse().unwrap());
        h.insert("connection", "x-secret-hop".parse().unwrap());
        h.insert("x-secret-hop", "hop".parse().unwrap());
        h.insert("keep-alive", "timeout=1".parse().unwrap());
        r
    })
    .await;
    let gw = gateway("").await;
    let c = client();
    for code in [
        200u16, 201, 202, 203, 206, 301, 302, 400, 401, 403, 404, 409, 418, 422, 429, 500, 502,
        503, 504,
    ] {
        let got = send(
            &c,
            via_header(&gw, up.addr, &format!("/{code}"))
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status.as_u16(), code);
        assert_eq!(got.body, format!("status {code}"));
        assert!(
            got.header("x-tollgate-error").is_none(),
            "provider errors are not tollgate errors"
        );
        assert!(got.header("x-tollgate-request-id").is_some());
        let cookies: Vec<_> = got.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1; Path=/", "b=2; Path=/"]);
        assert!(got.header("x-secret-hop").is_none() && got.header("keep-alive").is_none());
    }
    for code in [204u16, 304] {
        let got = send(
            &c,
            via_header(&gw, up.addr, &format!("/{code}"))
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status.as_u16(), code);
    }
}

#[tokio::test]
async fn binary_bodies_round_trip_byte_for_byte() {
    let up = upstream(|req: Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        let body = req.into_body().collect().await.unwrap().to_bytes();
        Response::new(tollgate::body::full(body))
    })
    .await;
    let gw = gateway("").await;
    let mut data = vec![0u8; 3 * 1024 * 1024 + 17];
    fastrand::Rng::with_seed(7).fill(&mut data);
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/")
            .method("POST")
            .body(bytes_body(data.clone()))
            .unwrap(),
    )
    .await;
    assert_eq!(got.body.len(), data.len());
    assert!(got.body == data, "body changed in transit");
}

#[tokio::test]
async fn request_ids_are_generated_unique_and_on_errors_too() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let c = client();
    let a = send(&c, via_header(&gw, up.addr, "/").body(empty()).unwrap()).await;
    let b = send(&c, via_header(&gw, up.addr, "/").body(empty()).unwrap()).await;
    let (a, b) = (
        a.header("x-tollgate-request-id").unwrap(),
        b.header("x-tollgate-request-id").unwrap(),
    );
    assert_ne!(a, b);
    let err = send(
        &c,
        Request::get(format!("http://{}/", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert!(err.header("x-tollgate-request-id").is_some());
}

#[tokio::test]
async fn http2_trailers_pass_through() {
    use bytes::Bytes;
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};
    let up = upstream(|_req| async {
        let frames = vec![
            Ok::<_, tollgate::body::BoxError>(Frame::data(Bytes::from_static(b"payload"))),
            Ok(Frame::trailers({
                let mut t = http::HeaderMap::new();
                t.insert("grpc-status", "0".parse().unwrap());
                t.insert("x-checksum", "abc".parse().unwrap());
                t
            })),
        ];
        let body: Body = StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync();
        let mut r = Response::new(body);
        // RFC 9110 §6.6.2: HTTP/1.1 senders declare trailer fields up front.
        r.headers_mut()
            .insert("trailer", "grpc-status, x-checksum".parse().unwrap());
        r
    })
    .await;
    // h2c prior knowledge client → tollgate → h2 upstream via routes? Plain http upstreams
    // speak HTTP/1.1 from tollgate; trailers ride on chunked encoding there when the client
    // asked for them with `te: trailers`.
    let gw = gateway("").await;
    let echo = echo_upstream().await;
    let seen = send(
        &client(),
        via_header(&gw, echo.addr, "/")
            .header("te", "trailers")
            .body(empty())
            .unwrap(),
    )
    .await
    .json();
    assert_eq!(
        headers_named(&seen, "te"),
        ["trailers"],
        "te: trailers is forwarded"
    );
    let req = via_header(&gw, up.addr, "/")
        .header("te", "trailers")
        .body(empty())
        .unwrap();
    let resp = h2c_client().request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().expect("trailers arrive");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    assert_eq!(trailers.get("x-checksum").unwrap(), "abc");
    assert_eq!(collected.to_bytes(), "payload");
}
