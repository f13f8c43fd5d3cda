//! The web explorer (`kv serve --ui`): a page that lists, opens, edits and deletes entries of the
//! default database and follows live changes, served from the binary itself.
//!
//! - `GET /ui`, `/ui/app.js`, `/ui/app.css`: the page, its script and its style, embedded with
//!   `include_str!` (hand-written, nothing fetched from elsewhere). They hold no data and are
//!   served without the token.
//! - `POST /ui/api/...`: the JSON API the page calls ([`api`]), each call with the same access
//!   token as the KV Connect API in its `authorization: Bearer` header (never in the URL, so it
//!   never reaches a log or a proxy's access log); keys travel in request bodies for the same
//!   reason. The writes (`set`, `delete`) answer 403 unless the explorer is
//!   [`crate::Explorer::ReadWrite`]; every write carries the versionstamp the page last saw as a check,
//!   and a conflict answers 409 with the current entry instead of overwriting it.
//! - `POST /ui/api/watch`: a server-sent-events stream of the states of the keys on screen
//!   ([`live`]).
//!
//! Off unless [`crate::ServerConfig::ui`] says otherwise; the paths are then a 404 that names
//! the flag.

mod api;
mod entry;
mod live;
mod stats;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use crate::metrics::Endpoint;
use crate::response::{Failure, ResponseBody, bytes_response, method_not_allowed, text_response};
use crate::shared::Shared;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Whether `path` is one of the explorer's.
pub(crate) fn owns(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The metrics label of an explorer path.
pub(crate) fn endpoint(path: &str) -> Endpoint {
    if path.starts_with("/ui/api/") {
        Endpoint::UiApi
    } else {
        Endpoint::Ui
    }
}

/// Answers a request for an explorer path (the server serves the explorer).
pub(crate) async fn handle(request: Request<Incoming>, shared: &Shared) -> Response<ResponseBody> {
    let path = request.uri().path().to_owned();
    if let Some(operation) = path.strip_prefix("/ui/api/") {
        let operation = operation.to_owned();
        return api::handle(&operation, request, shared)
            .await
            .unwrap_or_else(Failure::into_response);
    }
    let asset = match path.as_str() {
        "/ui" | "/ui/" => Some(("text/html; charset=utf-8", INDEX_HTML)),
        "/ui/app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "/ui/app.css" => Some(("text/css; charset=utf-8", APP_CSS)),
        _ => None,
    };
    let Some((content_type, text)) = asset else {
        return text_response(StatusCode::NOT_FOUND, "Resource not found.".into());
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return method_not_allowed("GET, HEAD");
    }
    let mut response = bytes_response(content_type, text.as_bytes().to_vec());
    let headers = response.headers_mut();
    // The page runs only its own script and style, talks only to this server, and cannot be
    // framed by another site.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Explorer;

    #[test]
    fn the_page_loads_only_its_own_files() {
        assert!(INDEX_HTML.contains("src=\"/ui/app.js\""));
        assert!(INDEX_HTML.contains("href=\"/ui/app.css\""));
        for text in [INDEX_HTML, APP_JS, APP_CSS] {
            assert!(!text.contains("http://"), "an outside URL in an asset");
            assert!(!text.contains("https://"), "an outside URL in an asset");
        }
        // The token never goes into a URL: the script sends it only as a header.
        assert!(APP_JS.contains("Authorization"));
        assert!(!APP_JS.contains("?token"));
    }

    #[test]
    fn paths_and_labels() {
        assert!(owns("/ui") && owns("/ui/app.js") && owns("/ui/api/list"));
        assert!(!owns("/uix") && !owns("/") && !owns("/v2/watch"));
        assert_eq!(endpoint("/ui/api/list"), Endpoint::UiApi);
        assert_eq!(endpoint("/ui"), Endpoint::Ui);
        assert!(!Explorer::default().enabled());
        assert!(Explorer::ReadOnly.enabled() && !Explorer::ReadOnly.writable());
        assert!(Explorer::ReadWrite.writable());
    }
}
