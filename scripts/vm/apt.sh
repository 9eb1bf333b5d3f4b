# apt.sh: a private apt configuration for fetch.sh and qemu.sh, sourced: `private_apt DIR
# SOURCES` makes DIR an apt state of its own (its lists, its package cache, an empty
# status), with SOURCES as its only source list, and sets `aptopts` to the options that make
# apt-get and apt-cache use it and nothing of the host's (no host sources, preferences,
# lists or lock).
private_apt() {
    local dir=$1 sources=$2
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    cp "$sources" "$dir/sources.list"
    [ -e "$dir/status" ] || : >"$dir/status"
    aptopts=(
        -o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=/dev/null"
        -o "Dir::State::Lists=$dir/lists" -o "Dir::State::Status=$dir/status"
        -o "Dir::Cache=$dir/cache" -o Debug::NoLocking=1 -o Acquire::Languages=none
        -o APT::Sandbox::User=root -o quiet=1
    )
}
