graph [
  DateObtained "26/11/26"
  GeoLocation "Europe, USA"
  Network "Testnet"
  Type "REN"
  node [
    id 0
    label "London"
    Country "United Kingdom"
    Internal 1
    Latitude 51.50853
    Longitude -0.12574
  ]
  node [
    id 1
    label "Paris"
    Country "France"
    Internal 1
    Latitude 48.85341
    Longitude 2.3488
  ]
  node [
    id 2
    label "New York"
    Country "United States"
    Internal 1
    Latitude 40.71427
    Longitude -74.00597
  ]
  node [
    id 3
    label "S&#227;o Paulo"
    Country "Brazil"
    Internal 1
    Latitude -23.5475
    Longitude -46.63611
  ]
  node [
    id 4
    label "New York"
    Country "United States"
    Internal 1
    Latitude 40.71427
    Longitude -74.00597
  ]
  node [
    id 5
    label "Peer AS 1234"
    Internal 0
  ]
  node [
    id 6
    label "Berlin"
    Country "Germany"
    Internal 1
    Latitude 52.52437
    Longitude 13.41053
  ]
  edge [
    source 0
    target 1
    LinkLabel "10 Gbps"
    LinkSpeed "10"
    LinkSpeedUnits "G"
    LinkSpeedRaw 10000000000.0
  ]
  edge [
    source 0
    target 2
    LinkLabel "2.5 Gbps"
    LinkSpeedRaw 2500000000.0
  ]
  edge [
    source 2
    target 0
    LinkLabel "2.5 Gbps"
    LinkSpeedRaw 2500000000.0
  ]
  edge [
    source 2
    target 3
    LinkLabel "OC-3"
    LinkSpeedRaw 155520000.0
  ]
  edge [
    source 2
    target 4
    LinkType "Metro"
  ]
  edge [
    source 1
    target 5
    LinkLabel "1 Gbps"
    LinkSpeedRaw 1000000000.0
  ]
  edge [
    source 3
    target 3
  ]
]
