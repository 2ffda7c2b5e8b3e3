// Package hostport checks a host:port address as the programs' flags take
// it (gravelerd's listen addresses, the cleaner's metrics address, etcd
// endpoints), so that a port out of range or not a number is refused when
// the flags are read, naming the flag, rather than when it is dialled or
// bound. Safe for concurrent use.
//
// Errors say what is wrong with the address, not which flag held it: the
// caller names the flag.
package hostport

import (
	"fmt"
	"net"
	"strings"
)

// Split splits addr ("host:port", "[ipv6]:port", or ":port" for every
// interface) into its host and port, refusing a port that is not a
// decimal number from minPort to 65535: 0 asks a listener for any free
// port, and a service name ("http") would be looked up only when used.
func Split(addr string, minPort int) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("want host:port: %v", err)
	}
	if p != "" && len(p) <= 5 && strings.Trim(p, "0123456789") == "" {
		for _, c := range p {
			port = port*10 + int(c-'0')
		}
		if port >= minPort && port <= 65535 {
			return host, port, nil
		}
	}
	return "", 0, fmt.Errorf("port %q is not a number from %d to 65535", p, minPort)
}
