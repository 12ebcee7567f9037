package forwarded

var ParseIPv4Port = parseIPv4Port
