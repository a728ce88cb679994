
R

h0traind (:.	
w

scalar
rng
configdB
modelfuzz.

h0"$
w"

scalarrng(

h1"
config(