# fs-checks.sh DIR, sourced by a guest's checks with DIR a mounted virtio-fs device: the
# ordinary system calls every device passes (write and read back, directories, rename,
# symbolic and hard links, modes, a 4 MiB copy, truncate, a missing name, removal), each a
# `PASS NAME` or `FAIL NAME: why` line with NAME prefixed by DIR's last component. Needs the
# guest's `check` and `same` helpers (scripts/vm/virtiofs-guest.sh) and a /tmp of its own.
d=$1
t=$(basename "$d")
echo hello >$d/a
same "$t-write-read" "$(cat $d/a)" hello
check "$t-mkdir" mkdir -p $d/dir/sub
echo x >$d/dir/f
check "$t-rename" mv $d/dir/f $d/dir/g
same "$t-rename-result" "$(ls $d/dir | tr '\n' ' ')" "g sub "
check "$t-symlink" ln -s g $d/dir/link
same "$t-readlink" "$(readlink $d/dir/link)" g
check "$t-hardlink" ln $d/dir/g $d/dir/h
same "$t-nlink" "$(stat -c %h $d/dir/g)" 2
check "$t-chmod" chmod 640 $d/dir/g
same "$t-mode" "$(stat -c %a $d/dir/h)" 640
dd if=/dev/urandom of=/tmp/rand bs=64k count=64 2>/dev/null
cp /tmp/rand $d/big
same "$t-4MiB-copy" "$(md5sum <$d/big)" "$(md5sum </tmp/rand)"
check "$t-truncate" truncate -s 1000 $d/big
same "$t-truncated-size" "$(stat -c %s $d/big)" 1000
same "$t-missing" "$([ -e $d/missing ] && echo there || echo missing)" missing
check "$t-unlink" rm -rf $d/dir $d/big $d/a
same "$t-empty-again" "$(ls -A $d | wc -l)" 0
