use futures::TryStreamExt;
use open_deno_kv::{Json, Kv, ListOptions, Selector, key};

#[derive(serde::Serialize, serde::Deserialize)]
struct User {
    name: String,
    age: u32,
}

#[tokio::main]
async fn main() -> open_deno_kv::Result<()> {
    let kv = Kv::open("./data.sqlite3").await?; // or "redb:./data.redb", "memory:", "http://…"
    kv.set(key!["greeting"], "hello").await?;
    let alice = User {
        name: "Alice".into(),
        age: 30,
    };
    kv.set(key!["users", 1], Json(alice)).await?;
    let alice = kv.get(key!["users", 1]).await?; // alice.value_as::<User>()?
    let res = kv
        .atomic()
        .check(&alice)
        .sum(key!["visits"], 1u64)
        .commit()
        .await?;
    if !res.is_committed() {
        println!("Alice changed since she was read");
    }
    let mut users = kv.list(Selector::prefix(key!["users"]), ListOptions::default())?;
    while let Some(user) = users.try_next().await? {
        println!("{} {}", user.key, user.value_as::<User>()?.name);
    }
    kv.close().await
}
