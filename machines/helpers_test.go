package machines_test

import "github.com/siderolabs/talos/pkg/machinery/role"

func roleReader() role.Set { return role.MakeSet(role.Reader) }
