// Command etcd is the etcd server, built from the go.etcd.io/etcd/server/v3
// module at the version pinned in go.mod. It exists so the test control plane
// can build a current etcd from Go modules instead of relying on a distro
// package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
