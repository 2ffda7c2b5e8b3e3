// Command etcdproc is etcd's own main (go.etcd.io/etcd/server/v3/etcdmain),
// built by the chaos tests so that each etcd member is a separate OS
// process they can kill -9 and SIGSTOP. It takes etcd's flags.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
