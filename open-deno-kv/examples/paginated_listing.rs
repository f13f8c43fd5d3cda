//! Paging through a listing the way a web API would: each request asks for one page and gets a
//! cursor for the next. The cursor strings are Deno's, so a Deno program could continue the same
//! listing (`kv.list({prefix: ["users"]}, {cursor})`).
//!
//! ```text
//! cargo run -p open-deno-kv --example paginated_listing
//! ```

use futures::TryStreamExt;
use open_deno_kv::{Json, Kv, ListOptions, Selector, key};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct User {
    name: String,
}

/// One "request": up to `size` users after `cursor`, and the cursor to ask for the next page.
async fn page(
    kv: &Kv,
    cursor: Option<String>,
    size: usize,
) -> open_deno_kv::Result<(Vec<String>, Option<String>)> {
    let options = ListOptions {
        limit: Some(size),
        cursor,
        ..Default::default()
    };
    let mut stream = kv.list(Selector::prefix(key!["users"]), options)?;
    let mut names = Vec::new();
    while let Some(entry) = stream.try_next().await? {
        names.push(entry.value_as::<User>()?.name);
    }
    // A short page is the last one.
    let next = if names.len() == size {
        stream.cursor()
    } else {
        None
    };
    Ok((names, next))
}

#[tokio::main]
async fn main() -> open_deno_kv::Result<()> {
    let kv = Kv::open("memory:").await?;
    for i in 1..=23u64 {
        let user = User {
            name: format!("user{i:02}"),
        };
        kv.set(key!["users", i], Json(user)).await?;
    }

    let mut cursor = None;
    let mut number = 1;
    loop {
        let (names, next) = page(&kv, cursor, 10).await?;
        println!(
            "page {number}: {} (next cursor: {next:?})",
            names.join(", ")
        );
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        number += 1;
    }
    kv.close().await?;
    Ok(())
}
