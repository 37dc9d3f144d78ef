"""Labelled pairs for the blind-witness threshold: a claim, a witness's own statement, and whether it says the same.

Matches restate the finding in other words (some in another language);
non-matches are about the same component but say something else -- the
hard case, since e5's cosines crowd together on one topic.
"""

from __future__ import annotations

from typing import Final

PAIRS: Final = (
    ("The cache warms in ninety seconds after a deploy.", "I checked the deploy log: the cache is warm about ninety seconds after each deploy.", True),
    ("The cache warms in ninety seconds after a deploy.", "Deploys take about ten minutes because the image is rebuilt from scratch.", False),
    ("The cache warms in ninety seconds after a deploy.", "The cache is cleared every night at two.", False),
    ("Deploys take about ten minutes because the image is rebuilt from scratch.", "I timed it: a deploy rebuilds the whole image, which is why it needs roughly ten minutes.", True),
    ("Deploys take about ten minutes because the image is rebuilt from scratch.", "Deploys fail when the registry is down.", False),
    ("The store tests are flaky on arm64 CI because two workers share one temp directory.", "Reproduced here: the store test suite fails now and then on arm64 CI, since two workers use the same temporary directory.", True),
    ("The store tests are flaky on arm64 CI because two workers share one temp directory.", "The store tests are slow on arm64 because the disk is network-backed.", False),
    ("The store tests are flaky on arm64 CI because two workers share one temp directory.", "Les tests du stockage échouent au hasard sur arm64 parce que deux workers partagent le même répertoire temporaire.", True),
    ("The integration tests time out because the mock server starts after the first request.", "Integration tests hit a timeout since the mock server only starts once the first request has been sent.", True),
    ("The integration tests time out because the mock server starts after the first request.", "The integration tests need the mock server's port to be free.", False),
    ("The login page rejects passwords longer than 64 characters.", "Passwords over 64 characters are refused by the login form.", True),
    ("The login page rejects passwords longer than 64 characters.", "The login page shows a captcha after three failed attempts.", False),
    ("The login page rejects passwords longer than 64 characters.", "Die Anmeldeseite lehnt Passwörter mit mehr als 64 Zeichen ab.", True),
    ("Database migrations run before the web workers start.", "The web workers only come up after the migrations have finished.", True),
    ("Database migrations run before the web workers start.", "Database migrations are written in plain SQL.", False),
    ("The nightly job regenerates the release notes from the changelog.", "Release notes are rebuilt from the changelog every night by a scheduled job.", True),
    ("The nightly job regenerates the release notes from the changelog.", "The nightly job also prunes old docker images.", False),
    ("The API returns 400 for page 0 because pages start at 1.", "Asking the API for page zero gives a 400: pagination is one-based.", True),
    ("The API returns 400 for page 0 because pages start at 1.", "The API returns 429 when a client sends too many requests.", False),
    ("The API returns 400 for page 0 because pages start at 1.", "API はページ番号が 1 から始まるので、ページ 0 を要求すると 400 を返す。", True),
    ("Builds on macOS need Xcode 15 because of the new linker.", "On macOS the build requires Xcode 15, due to the new linker.", True),
    ("Builds on macOS need Xcode 15 because of the new linker.", "Builds on macOS are twice as slow as on Linux.", False),
    ("The memory leak comes from the image cache never evicting entries.", "The leak is the image cache: entries are never evicted, so it grows forever.", True),
    ("The memory leak comes from the image cache never evicting entries.", "The memory leak was first seen in version 2.3.", False),
    ("Uploads over 2 GB fail because the proxy buffers the whole body.", "Files bigger than two gigabytes cannot be uploaded: the proxy keeps the entire request body in memory.", True),
    ("Uploads over 2 GB fail because the proxy buffers the whole body.", "Uploads are stored in the eu-west bucket.", False),
    ("Uploads over 2 GB fail because the proxy buffers the whole body.", "Загрузка файлов больше 2 ГБ падает, потому что прокси буферизует всё тело запроса.", True),
    ("The search index is rebuilt when the schema version changes.", "Changing the schema version triggers a full rebuild of the search index.", True),
    ("The search index is rebuilt when the schema version changes.", "The search index lives on a separate disk.", False),
    ("Timezone bugs appear because the scheduler stores local times.", "The scheduler keeps times in local time, which is where the timezone bugs come from.", True),
    ("Timezone bugs appear because the scheduler stores local times.", "The scheduler runs every five minutes.", False),
    ("Timezone bugs appear because the scheduler stores local times.", "调度器保存的是本地时间，所以出现了时区错误。", True),
)
