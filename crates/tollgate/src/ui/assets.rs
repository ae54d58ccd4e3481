//! The dashboard's pages, script, style sheet and icon, compiled into the binary: no CDN,
//! no Node at run time, nothing beside the binary. The script renders every value it is
//! given as text (`textContent`, never markup), and the pages load no inline script, so
//! the Content-Security-Policy the admin listener sends ([`CSP`]) can forbid it.

use crate::body::{Body, full};
use http::{HeaderValue, Response, header};

/// Sent with every admin response: scripts and styles only from the dashboard's own
/// files, data only from its own origin, forms only to itself, no framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub struct Asset {
    pub path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        path: "/ui/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/app.js"),
    },
    Asset {
        path: "/ui/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/app.css"),
    },
    Asset {
        path: "/ui/icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("assets/icon.svg"),
    },
];

pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

impl Asset {
    pub fn response(&self) -> Response<Body> {
        page(self.content_type, self.body.to_owned())
    }
}

fn page(content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(full(body));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

pub fn index_page() -> Response<Body> {
    page(
        "text/html; charset=utf-8",
        include_str!("assets/index.html").to_owned(),
    )
}

/// The login form; after a refused token, with a line saying so (fixed text).
pub fn login_page(failed: bool) -> Response<Body> {
    let message = if failed {
        r#"<p class="failed" role="alert">That token is not this gateway's <code>admin.token</code>.</p>"#
    } else {
        ""
    };
    page(
        "text/html; charset=utf-8",
        include_str!("assets/login.html").replace("<!--message-->", message),
    )
}
